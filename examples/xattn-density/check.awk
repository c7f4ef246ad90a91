# check.awk - the assertions of the xattn-density experiment over
# out/results.tsv: for every (length, stride) a higher threshold never lowers
# the density or the mean recall, and the mean recall stays within 0.05 of
# the threshold or above it.
NR > 1 {
    k = $1 " " $2
    if ((k in d) && ($4 < d[k] - 1e-9 || $5 < r[k] - 1e-9)) {
        print "not monotone at L=" $1 " S=" $2 " T=" $3
        bad = 1
    }
    d[k] = $4
    r[k] = $5
    if ($5 < $3 - 0.05) {
        print "recall " $5 " below threshold " $3 " at L=" $1 " S=" $2
        bad = 1
    }
}
END {
    if (bad)
        exit 1
    print "xattn-density: density and recall grow with the threshold"
}
