# caption: The cost of batch invariance: at each batch size B, the ref kernel's tokens/s over the blas kernel's in the batched steps of batch-sweep (the same requests, the same other sequences), and the slowdown in % (vLLM reports 34-62% for its batch-invariant mode on GPUs). Measured side by side in one experiment; on a shared machine the ratio is the figure, not the speeds.
# batch-cost: one block; columns: 1 B, 2 ref tokens/s / blas tokens/s, 3 slowdown %.
set multiplot title 'The cost of batch invariance: ref against blas at each batch size'
panel_l = 0.115
panel_gap = 0.12
set logscale x 2
set offsets graph 0.04, graph 0.04, 0, 0
set xlabel 'batch size B'
set format x '%g'
set xtics (1, 2, 4, 8, 16)
eval panel(1, 2)
set ylabel 'ref tokens/s / blas tokens/s'
set yrange [0:*]
plot blocks index 0 using 1:2 with linespoints lt 1 notitle, 1 with lines lt 8 dt 2 notitle
eval panel(2, 2)
set ylabel 'slowdown of ref (%)'
set yrange [*:*]
plot blocks index 0 using 1:3 with linespoints lt 1 notitle, 0 with lines lt 8 dt 2 notitle
eval legend_setup
plot -1 notitle, keyentry with linespoints lt 1 title key(1), keyentry with lines lt 8 dt 2 title 'blas (= 1, 0%)'
unset multiplot
