# caption: Chunk-size sweep: left, the median (p50) time to first token of the cold and the reused run against the prefill chunk C (align chunk: the grid C; align none: ubatch = C, llama.cpp-style); right, the share of requests whose reused run is not bit-identical to cold. log2 x axis.
# seed003-sweep: blocks = one per align; columns: 1 C, 2 TTFT p50 cold ms,
# 3 TTFT p50 reused ms, 4 % not bit-identical, 5 requests.
# Colour = align, dashed/open = cold, solid/filled = reused.
set multiplot title 'seed003: chunk size C against TTFT and divergence'
panel_l = 0.115
panel_gap = 0.11
set logscale x 2
set offsets graph 0.04, graph 0.04, 0, 0
set xlabel 'chunk size C (tokens, log2)'
set format x '%g'

eval panel(1, 2)
set ylabel 'TTFT p50 (ms)'
set yrange [0:*]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i dt 2 pt 6 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:3 with linespoints lt i dt 1 notitle

eval panel(2, 2)
set ylabel '% of requests not bit-identical'
set yrange [-2:102]
set ytics 0, 20, 100
plot for [i = 1:nkeys] blocks index (i - 1) using 1:4 with linespoints lt i notitle

eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i), \
     keyentry with linespoints lt 8 dt 2 pt 6 title 'cold', \
     keyentry with linespoints lt 8 dt 1 pt 7 title 'reused'
unset multiplot
