# caption: Chunk-size sweep against the prefill chunk C (align chunk: the grid C; align none: ubatch = C, llama.cpp-style), log2 x axis. Left: measured time to first token, the median over requests of each request's median of --repeat timings, with a band from the (median over requests of the) fastest to the slowest timing; middle: the modeled TTFT (each request's FLOPs and restored bytes priced at the runs' calibration, see the caption's price line: deterministic when priced at a reference calibration); right: the share of requests whose reused run is not bit-identical to cold.
# seed003-sweep: blocks = one per align; columns: 1 C, 2-4 cold TTFT p50 / lo / hi (ms),
# 5-7 reused TTFT p50 / lo / hi (ms), 8 modeled cold (ms), 9 modeled reused (ms),
# 10 % not bit-identical, 11 requests.
# Colour = align, dashed/open = cold, solid/filled = reused; bands: the timings' min-max.
set multiplot title 'seed003: chunk size C against TTFT (measured, modeled) and divergence'
panel_l = 0.095
panel_r = 0.985
panel_gap = 0.105
set logscale x 2
set offsets graph 0.04, graph 0.04, 0, 0
set xlabel 'chunk size C (log2)'
set format x '%g'
set xtics ('16' 16, '32' 32, '64' 64, '128' 128, '256' 256)

eval panel(1, 3)
set ylabel 'TTFT measured (ms)' offset 1.2, 0
set yrange [0:*]
set style fill transparent solid 0.18 noborder
plot for [i = 1:nkeys] blocks index (i - 1) using 1:3:4 with filledcurves lt i notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:6:7 with filledcurves lt i notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i dt 2 pt 6 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:5 with linespoints lt i dt 1 notitle

eval panel(2, 3)
set ylabel 'TTFT modeled (ms)' offset 1.2, 0
set yrange [0:*]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:8 with linespoints lt i dt 2 pt 6 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:9 with linespoints lt i dt 1 notitle

eval panel(3, 3)
set ylabel '% not bit-identical' offset 1.2, 0
set yrange [-2:102]
set ytics 0, 20, 100
plot for [i = 1:nkeys] blocks index (i - 1) using 1:10 with linespoints lt i notitle

eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i), \
     keyentry with linespoints lt 8 dt 2 pt 6 title 'cold', \
     keyentry with linespoints lt 8 dt 1 pt 7 title 'reused', \
     keyentry with filledcurves lt 8 fs transparent solid 0.3 title 'min-max of the timings'
unset multiplot
