# caption: The same request sent alone and then N more times to kvreplay serve --parallel 8 while a seeded random number (0 to 7) of other generations ran beside it (kvreplay probe --concurrency 8 --load-repeat N), stories260K, greedy. Left: distinct greedy outputs and distinct logit byte strings (the top-K log-probabilities of every generated position) over the N + 1 answers; right: the share of the sends under load that are bit-identical to the request alone. With --kernel blas the batch changes the bits; with --kernel ref (batch-invariant kernels, each prompt on its own grid) every answer is the same bytes.
# batch-load: blocks = one per kernel; columns: 1 index, 2 kernel, 3 distinct greedy outputs,
# 4 distinct logit byte strings, 5 % of sends bit-identical to alone, 6 sends.
set multiplot title 'The same request under concurrent load: distinct answers per kernel'
set xrange [-0.6:1.6]
set grid noxtics
set xtics scale 0
set style fill solid 0.85 border -1
panel_l = 0.11
panel_gap = 0.13
eval panel(1, 2)
set ylabel 'distinct answers'
set yrange [0:*]
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 - 0.2):3:(0.38):xtic(2) with boxes lt i fs solid 0.45 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using ($1 + 0.2):4:(0.38) with boxes lt i notitle
eval panel(2, 2)
set ylabel '% of sends bit-identical to alone'
set yrange [0:105]
plot for [i = 1:nkeys] blocks index (i - 1) using 1:5:(0.6):xtic(2) with boxes lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i), \
     keyentry with boxes lt 8 fs solid 0.45 title 'greedy outputs', \
     keyentry with boxes lt 8 title 'logit byte strings'
unset multiplot
