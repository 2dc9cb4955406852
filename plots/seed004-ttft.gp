# caption: Median (p50) time to first token of the follow-up requests (turn > 0) against the length of the static context, cold (dashed, open points) and reused (solid), for the policy with the swa-threshold quirk and the fixed one. log2 x, log10 y.
# seed004-ttft: blocks = one per variant; columns: 1 context tokens,
# 2 TTFT p50 cold ms, 3 TTFT p50 reused ms.
set multiplot title 'seed004: TTFT of follow-up queries against context length'
set logscale x 2
set logscale y 10
set offsets graph 0.05, graph 0.05, 0, 0
set xlabel 'context length (tokens, log2)'
set ylabel 'TTFT p50 (ms, log)'
set format y '%g'
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2:xtic(toklabel($1)) with linespoints lt i dt 2 pt 6 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:3 with linespoints lt i dt 1 notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i), \
     keyentry with linespoints lt 8 dt 2 pt 6 title 'cold', \
     keyentry with linespoints lt 8 dt 1 pt 7 title 'reused'
unset multiplot
