# caption: Reuse fraction of the follow-up requests (turn > 0: sum of reused tokens / sum of prompt tokens) against the length of the static context, for the policy with the swa-threshold quirk and the fixed one. log2 x axis.
# seed004-reuse: blocks = one per variant; columns: 1 context tokens,
# 2 reuse fraction, 3 follow-up requests.
set multiplot title 'seed004: prefix reuse of follow-up queries against context length'
set logscale x 2
set offsets graph 0.05, graph 0.05, 0, 0
set xlabel 'context length (tokens, log2)'
set ylabel 'reuse fraction (reused / prompt)'
set yrange [-0.02:1.02]
set ytics 0, 0.2, 1
set format y '%.1f'
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2:xtic(toklabel($1)) with linespoints lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i)
unset multiplot
