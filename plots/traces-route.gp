# caption: Eight instances with local caches of 3M tokens (radix, LRU), three routers: round-robin, least-loaded (the instance free first) and cache-aware (the least estimated TTFT: queue plus restore and prefill of what the instance lacks, as Mooncake's scheduler and Dynamo's KV router weigh overlap against load): hit rate by tokens, TTFT p50 (s) and p99 (tens of s), llama3-70b-a800x8 profile.
# traces-route: blocks = one per route; columns: 1 group, 2 label, 3 value.
set multiplot title 'traces: routing on 8 instances (Mooncake conversation trace)'
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
set xtics ('TTFT p50' 1, 'TTFT p99 / 10' 2)
set yrange [0:*]
set ytics autofreq
set format y '%g'
set ylabel 'seconds'
plot for [i = 1:nkeys] blocks index (i - 1) using ($1 > 0 ? $1 + baroff(i, nkeys) : NaN):3:(barw(nkeys)) with boxes lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with boxes lt i title key(i)
unset multiplot
