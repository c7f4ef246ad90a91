# agg.awk - sweep.csv into the plots' data: mean and standard deviation over
# the seeds of each point.
#   awk -F, -v pool=BYTES -v cost=NAME -v x=reuse -f agg.awk sweep.csv
# x=reuse: one block per chunk size (512, 1024, 4096; gnuplot indexes 0-2)
# at that pool; x=pool: the same against the pool in GiB at reuse 0.7.
# Columns: x, hit rate with the system prompt (mean, sd), chunk hit rate
# (mean, sd), TTFT reduction (mean, sd), end-to-end speedup (mean, sd).
function add(k, i, v) { s[k, i] += v; q[k, i] += v * v }
NR == 1 { next }
$1 != cost { next }
x == "reuse" && $5 != pool { next }
x == "pool" && $3 != "0.7" { next }
{
    xv = x == "reuse" ? $3 : $5 / 1024 ^ 3
    k = $2 SUBSEP xv
    if (!(k in n)) { keys[$2] = keys[$2] " " xv }
    n[k]++
    add(k, 1, $8); add(k, 2, $7); add(k, 3, $12); add(k, 4, $14)
}
END {
    split("512 1024 4096", cs, " ")
    for (ci = 1; ci <= 3; ci++) {
        c = cs[ci]
        printf "# chunk %s\n", c
        m = split(keys[c], xs, " ")
        for (j = 1; j <= m; j++) {
            k = c SUBSEP xs[j]
            printf "%s", xs[j]
            for (i = 1; i <= 4; i++) {
                mu = s[k, i] / n[k]; v = q[k, i] / n[k] - mu * mu
                printf " %.6f %.6f", mu, sqrt(v > 0 ? v : 0)
            }
            printf "\n"
        }
        printf "\n\n"
    }
}
