# caption: Hit rate (reused tokens over input tokens, min(k x 512, input) per request) against the cache's capacity in tokens, log x, on the Mooncake conversation trace (12,031 requests), one curve per policy and eviction order; one instance, the cache updated in arrival order (the analogue of the Mooncake paper's Figure 9, which uses LRU). The top of the curves is the ideal hit rate `kvreplay trace info` prints (0.3736).
# traces-capacity: blocks = one per policy/eviction; columns: 1 capacity, 2 hit rate (tokens), 3 (blocks).
set multiplot title 'traces: hit rate against cache capacity (Mooncake conversation trace)'
set logscale x 10
set format x '10^{%L}'
set format x '%.0e'
set xlabel 'cache capacity (tokens, log)'
set ylabel 'hit rate (tokens)'
set yrange [0:0.45]
set ytics 0, 0.1, 0.4
set format y '%.1f'
plot for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i notitle
eval legend_setup
set key maxcols 6
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i)
unset multiplot
