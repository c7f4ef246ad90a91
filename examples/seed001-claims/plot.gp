# plot.gp - TTFT reduction and chunk hit rate against document reuse
set terminal pngcairo size 800,500 noenhanced
set output 'ttft.png'
set xlabel 'document reuse (oracle chunk hit rate)'
set ylabel 'fraction'
set xrange [0:1]
set yrange [0:1]
set key top left
set title "seed 001's claims (bands) and kvchunk sim, the seed's costs and pool"
set object 1 rect from 0.6, 0.5 to 0.8, 0.8 fc rgb '#ddeeff' fs solid 0.5 noborder behind
set object 2 rect from 0.6, 0.7 to 0.8, 0.9 fc rgb '#ffeedd' fs solid 0.4 noborder behind
plot 'ttft.dat' using 1:2 with linespoints title 'TTFT reduction, seed pool (claim 50-80%: blue)', \
     'ttft.dat' using 1:3 with linespoints title 'chunk hit rate, seed pool (claim 70-90%: orange)', \
     'ttft.dat' using 1:4 with linespoints dt 2 title 'TTFT reduction, 8x pool', \
     'ttft.dat' using 1:5 with linespoints dt 2 title 'chunk hit rate, 8x pool'
