# plot.gp - hit-rate.png from sweep.csv (see Makefile; local and paper are
# set on the command line).  Columns of kvchunk sim --csv: 1 policy,
# 5 prompt_tokens, 6 hit_tokens, 23 capacity_tokens.
set datafile separator ","
set terminal pngcairo size 1100,700 font ",11"
set output "hit-rate.png"
set logscale x 10
set format x "10^{%L}"
set xrange [5e3:2e9]
set yrange [0:0.5]
set grid
set key top left
set xlabel "cache capacity (tokens)"
set ylabel "prefix-cache hit rate (tokens)"
set title "Mooncake conversation trace: hit rate against capacity (block 512)"
unbounded = 1125899906842624
stats "< awk -F, '$1 == \"prefix\" && $23 == 1125899906842624' sweep.csv" using ($6 / $5) name "MAX" nooutput
set arrow from local, graph 0 to local, graph 1 nohead dashtype 2
set label sprintf("local cache %.0fM", local / 1e6) at local * 1.1, graph 0.95
policies = "prefix prefix-lfu prefix-radix"
titles = "'LRU (vLLM prefix)' 'LFU (prefix-lfu)' 'radix (prefix-radix)'"
plot for [j=1:3] sprintf("< awk -F, '$1 == \"%s\" && $23 < %.0f' sweep.csv", word(policies, j), unbounded) \
        using 23:($6 / $5) with linespoints title word(titles, j), \
     MAX_mean with lines dashtype 3 lw 2 title sprintf("unbounded cache, %.4f", MAX_mean), \
     paper with lines dashtype 4 lw 2 title sprintf("paper's cache ratio, %.2f", paper)
