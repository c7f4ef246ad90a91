# plot.gp - hit-rate.png and ttft.png from the four CSVs (see Makefile).
set datafile separator ","
set terminal pngcairo size 1200,900 font ",10"
set logscale x 2
set grid
set key bottom right
traces = "zipf0.8-sys1 zipf0.8-sys8 zipf1.0-sys1 zipf1.0-sys8"
titles = "'Zipf 0.8, 1 system prompt' 'Zipf 0.8, 8 system prompts' 'Zipf 1.0, 1 system prompt' 'Zipf 1.0, 8 system prompts'"
# columns: 1 capacity_tokens 2 capacity_gib 3 policy 4 token_hit_rate ... 18 ttft_mean_ms
pol(p, col) = sprintf("< awk -F, '$3 == \"%s\"' ", p)
policies = "prefix prefix-sorted chunk oracle"

set output "hit-rate.png"
set multiplot layout 2,2 title "Token hit rate vs cache size (retrieval-order top-5, 10,000 documents)"
set xlabel "cache size (GiB of 128 KiB/token KV)"
set ylabel "token hit rate"
set yrange [0:1]
do for [i=1:4] {
    t = word(traces, i)
    set title word(titles, i)
    plot for [j=1:4] sprintf("< awk -F, '$3 == \"%s\"' %s.csv", word(policies, j), t) \
        using 2:4 with linespoints title word(policies, j)
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
    plot for [j=1:4] sprintf("< awk -F, '$3 == \"%s\"' %s.csv", word(policies, j), t) \
        using 2:18 with linespoints title word(policies, j)
}
unset multiplot
