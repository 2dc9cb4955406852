# caption: Each request of the transcript computed again inside engine steps shared with B - 1 seeded other sequences (each off the request's grid, reading chunks of its own grid or decoding a token a step: replay --batch-check B - 1), small llama preset, sizes as swept. Left: the share of requests whose logit rows in the batch (the last prompt token's and every greedy decode step's) are memcmp-identical to their cold rows alone; right: the engine's tokens/s in those steps (every row computed, the other sequences' too). Side by side in one experiment on a shared machine: compare the kernels at each B, not the absolute figures.
# batch-sweep: blocks = one per kernel; columns: 1 B, 2 % bit-identical, 3 tokens/s, 4 requests.
set multiplot title 'Batch size against bit-identity and throughput, per kernel'
panel_l = 0.115
panel_gap = 0.12
set logscale x 2
set offsets graph 0.04, graph 0.04, 0, 0
set xlabel 'batch size B (the request and B - 1 others)'
set format x '%g'
set xtics (1, 2, 4, 8, 16)
eval panel(1, 2)
set ylabel '% bit-identical to alone'
set yrange [-2:105]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i notitle
eval panel(2, 2)
set ylabel 'tokens/s of the batched steps'
set yrange [0:*]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:3 with linespoints lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i)
unset multiplot
