# caption: Tokens prefilled by the reused run for every request of the replayed transcript, in replay order, raw and with the cch= checksum normalized; the grey dashed line is the prompt length (a request that reuses nothing prefills all of it).
# seed001-prefilled: blocks = one per variant; columns: 1 request number,
# 2 prefilled tokens, 3 prompt tokens.
set multiplot title 'seed001: tokens prefilled per request'
set xlabel 'request number (replay order)'
set ylabel 'prefilled tokens'
set yrange [0:*]
set xrange [0.5:*]
plot blocks index 0 using 1:3 with lines lc rgb grey dt 2 lw 1.2 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i), \
     keyentry with lines lc rgb grey dt 2 lw 1.2 title 'prompt length'
unset multiplot
