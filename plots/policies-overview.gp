# caption: The five cache policies (bars) on each workload (the SWE-agent trajectories pydicom and fcsimple, and the synthetic agent loop, each with a llama and a hybrid model), with --align chunk: reuse fraction, median TTFT speedup of the reused run over cold, the most bytes the cache held after a request, and the tokens the reused run prefilled.
# policies-overview: blocks = one per policy; columns: 1 workload index,
# 2 workload, 3 reuse fraction, 4 TTFT speedup p50, 5 MiB held, 6 prefilled x1000.
set multiplot title 'policies: five prefix-cache designs on the same transcripts (--align chunk)'
stats blocks index 0 using 1 nooutput
ng = int(STATS_max) + 1
set xrange [-0.55:ng - 0.45]
set grid noxtics
set xtics scale 0
set style fill solid 0.85 border -1
panel_l = 0.10
panel_gap = 0.13
top_t = 0.78
top_b = 0.54
bot_t = 0.47
bot_b = 0.21
bars(col) = sprintf("for [i = 1:nkeys] blocks index (i - 1) using ($1 + baroff(i, nkeys)):%d:(barw(nkeys)) with boxes lt i notitle", col)

eval panel(1, 2)
set tmargin at screen top_t
set bmargin at screen top_b
set format x ''
set ylabel 'reuse fraction'
set yrange [0:1]
set ytics 0, 0.25, 1
eval 'plot '.bars(3)

eval panel(2, 2)
set ylabel 'TTFT speedup (x)'
set yrange [0:*]
set ytics autofreq
eval 'plot '.bars(4)

eval panel(1, 2)
set tmargin at screen bot_t
set bmargin at screen bot_b
set format x '%g'
set xtics rotate by 25 right offset 0.5, 0
set ylabel 'cache MiB (max)'
eval 'plot '.bars(5).", blocks index 0 using 1:(NaN):xtic(2) notitle"

eval panel(2, 2)
set ylabel 'prefilled (x1000)'
eval 'plot '.bars(6).", blocks index 0 using 1:(NaN):xtic(2) notitle"

eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
