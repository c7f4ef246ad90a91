# plot.gp - the xattn-density figure: density, mean recall and the error of
# block-sparse attention against the threshold, one line per (length, stride).
# gnuplot -e "data='out/results.tsv'; out='x.png'; lengths='...'; strides='...'"
set terminal pngcairo size 1500,480 font ",10"
set output out
set datafile separator "\t"
set key bottom right font ",8"
set grid
set multiplot layout 1,3 title "XAttention block selection (block 128, causal)"
nl = words(lengths); ns = words(strides)
sel(col, L, S) = (column(1) == L && column(2) == S) ? column(col) : NaN

set xlabel "threshold"
set ylabel "density (kept / causal blocks)"
set yrange [0:1.02]
plot for [i=1:nl] for [j=1:ns] data skip 1 using 3:(sel(4, word(lengths,i)+0, word(strides,j)+0)) \
    with linespoints lt j dt i title sprintf("L=%s S=%s", word(lengths,i), word(strides,j))

set ylabel "mean recall (exact mass kept)"
set yrange [*:1.005]
plot for [i=1:nl] for [j=1:ns] data skip 1 using 3:(sel(5, word(lengths,i)+0, word(strides,j)+0)) \
    with linespoints lt j dt i title sprintf("L=%s S=%s", word(lengths,i), word(strides,j))

set xlabel "density"
set ylabel "RMSE of block-sparse vs dense attention"
set yrange [1e-4:0.2]
set logscale y
plot for [i=1:nl] for [j=1:ns] data skip 1 using (sel(4, word(lengths,i)+0, word(strides,j)+0)):(sel(7, word(lengths,i)+0, word(strides,j)+0) > 0 ? sel(7, word(lengths,i)+0, word(strides,j)+0) : NaN) \
    with linespoints lt j dt i title sprintf("L=%s S=%s", word(lengths,i), word(strides,j))
unset multiplot
