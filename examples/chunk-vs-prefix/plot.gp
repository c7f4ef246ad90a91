# plot.gp - hit-rate.png and ttft.png from the four CSVs (see Makefile).
set datafile separator ","
set terminal pngcairo size 1200,900 font ",10"
set logscale x 2
set grid
set key bottom right
traces = "zipf0.8-sys1 zipf0.8-sys8 zipf1.0-sys1 zipf1.0-sys8"
titles = "'Zipf 0.8, 1 system prompt' 'Zipf 0.8, 8 system prompts' 'Zipf 1.0, 1 system prompt' 'Zipf 1.0, 8 system prompts'"
# columns of kvchunk sim --csv: 1 policy, 2 token_hit_rate, 16 ttft_mean_ms,
# 22 capacity_bytes
policies = "prefix prefix-sorted chunk oracle"

set output "hit-rate.png"
set multiplot layout 2,2 title "Token hit rate vs cache size (retrieval-order top-5, 10,000 documents)"
set xlabel "cache size (GiB of 128 KiB/token KV)"
set ylabel "token hit rate"
set yrange [0:1]
do for [i=1:4] {
    t = word(traces, i)
    set title word(titles, i)
    plot for [j=1:4] sprintf("< awk -F, '$1 == \"%s\"' %s.csv", word(policies, j), t) \
        using ($22 / 2**30):2 with linespoints title word(policies, j)
}
unset multiplot

set output "ttft.png"
set multiplot layout 2,2 title "Modelled mean TTFT vs cache size (none: about 274 ms)"
set ylabel "mean TTFT (ms)"
set yrange [0:330]
set key top right horizontal maxrows 2
do for [i=1:4] {
    t = word(traces, i)
    set title word(titles, i)
    plot for [j=1:4] sprintf("< awk -F, '$1 == \"%s\"' %s.csv", word(policies, j), t) \
        using ($22 / 2**30):16 with linespoints title word(policies, j)
}
unset multiplot
