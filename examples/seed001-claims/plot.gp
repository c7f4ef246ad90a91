# plot.gp - the sweeps with the design's bands; reads reuse-fit.dat,
# reuse-small.dat, reuse-device.dat and pool.dat (agg.awk) and e2e.dat
# (e2e.sh), writes hit.png, ttft.png, pool.png and e2e.png.  Error bars: one standard deviation over the seeds.
set terminal pngcairo size 900,600 noenhanced font ',10'
set key below maxrows 3
set grid
set style fill solid 0.35 noborder
set yrange [0:1]
band_r = "#cfe3ff"

set output 'hit.png'
set title "Hit rate against document reuse (the system prompt counted), pool 272K tokens (solid) and 4.3 GB (dashed)\nband: the design's 70-90% at 60-80% reuse"
set xlabel 'document reuse (1 - share of never-seen documents)'
set ylabel 'hit rate'
set xrange [0.45:0.95]
set object 1 rect from 0.6, 0.7 to 0.8, 0.9 fc rgb band_r behind
plot for [i=0:2] 'reuse-fit.dat' index i using 1:2:3 with yerrorlines lw 2 title sprintf('%s-token chunks, 272K tokens', word('512 1024 4096', i + 1)), \
     for [i=0:2] 'reuse-small.dat' index i using 1:2:3 with yerrorlines dt 2 title sprintf('%s-token chunks, 4.3 GB', word('512 1024 4096', i + 1))
unset object 1

set output 'ttft.png'
set title "TTFT reduction against document reuse, pool 272K tokens: the design's costs (solid), Ascend 910 figures (dashed)\nband: the design's 50-80% at 60-80% reuse"
set ylabel 'TTFT reduction (1 - cached / uncached)'
set object 1 rect from 0.6, 0.5 to 0.8, 0.8 fc rgb band_r behind
plot for [i=0:2] 'reuse-fit.dat' index i using 1:6:7 with yerrorlines lw 2 title sprintf('%s-token chunks, design costs', word('512 1024 4096', i + 1)), \
     for [i=0:2] 'reuse-device.dat' index i using 1:6:7 with yerrorlines dt 2 title sprintf('%s-token chunks, Ascend 910', word('512 1024 4096', i + 1))
unset object 1

set output 'pool.png'
set title "Hit rate (system prompt counted, solid) and TTFT reduction (dashed) against pool size, 70% reuse, design costs\nband: the design's 70-90% hit rate; hot set 128K tokens; 4.3 GB is the design's pool"
set xlabel 'chunk pool, GiB of Llama-3.1-8B KV (all layers, 128 KiB a token)'
set ylabel 'fraction'
set logscale x 2
set xrange [3.5:80]
set object 1 rect from 3.5, 0.7 to 80, 0.9 fc rgb band_r behind
set arrow 1 from 4.3, 0 to 4.3, 1 nohead dt 3
plot for [i=0:2] 'pool.dat' index i using 1:2:3 with yerrorlines lw 2 title sprintf('hit rate, %s-token chunks', word('512 1024 4096', i + 1)), \
     for [i=0:2] 'pool.dat' index i using 1:6:7 with yerrorlines dt 2 title sprintf('TTFT reduction, %s-token chunks', word('512 1024 4096', i + 1))

set output 'e2e.png'
set title "End-to-end speedup against output length (13.4 ms a decoded token), 80% reuse, 4K chunks, pool 272K tokens\nband: the design's 2-5x; dashed: the TTFT speedup"
set xlabel 'output tokens'
set ylabel 'speedup over no cache'
unset arrow 1
unset object 1
set logscale x 2
set xrange [0.8:640]
set yrange [0:7]
set object 1 rect from 0.8, 2 to 640, 5 fc rgb band_r behind
plot 'e2e.dat' using 1:2:3 with yerrorlines lw 2 title "end to end, the design's costs", \
     'e2e.dat' using 1:4:5 with yerrorlines lw 2 title 'end to end, Ascend 910', \
     'e2e.dat' using 1:6 with lines dt 2 title "TTFT, the design's costs", \
     'e2e.dat' using 1:8 with lines dt 2 title 'TTFT, Ascend 910'
