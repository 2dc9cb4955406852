# caption: Ten instances with a local cache of 3M tokens each against one pool of 30M tokens that all share (round-robin routing, radix, LRU; time priced at the llama3-70b-a800x8 profile, reuse from the pool at its transfer bandwidth): hit rate by tokens, mean prefill time and mean TTFT (the analogue of the Mooncake paper's Figure 10).
# traces-pool: blocks = local, global; columns: 1 group, 2 label, 3 value.
set multiplot title 'traces: local caches against a global pool (10 instances, 3M tokens each)'
set grid noxtics
set xtics scale 0
set style fill solid 0.85 border -1
panel_l = 0.10
panel_gap = 0.10
eval panel(1, 2)
set lmargin at screen 0.10
set rmargin at screen 0.34
set xrange [-0.6:0.6]
set xtics ('hit rate' 0)
set yrange [0:0.45]
set ytics 0, 0.1, 0.4
set format y '%.1f'
set ylabel 'hit rate (tokens)'
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 == 0 ? $1 + baroff(i, nkeys) : NaN):3:(barw(nkeys)) with boxes lt i notitle
set lmargin at screen 0.45
set rmargin at screen 0.98
set xrange [0.4:2.6]
set xtics ('mean prefill' 1, 'mean TTFT' 2)
set yrange [0:*]
set ytics autofreq
set format y '%g'
set ylabel 'seconds'
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 > 0 ? $1 + baroff(i, nkeys) : NaN):3:(barw(nkeys)) with boxes lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
