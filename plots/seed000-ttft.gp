# caption: Time to first token of the first request of each fresh agent session (sessions numbered in replay order): the reused run (solid) with the anchor-cold-only quirk and fixed, and the cold run (dashed, open points).
# seed000-ttft: blocks = one per variant; columns: 1 session number,
# 2 TTFT reused ms, 3 TTFT cold ms.
set multiplot title 'seed000: TTFT per fresh session (disk anchor refresh)'
set xlabel 'fresh session number'
set ylabel 'TTFT (ms)'
set yrange [0:*]
set xrange [0.5:*]
set xtics 1
plot for [i = 1:nkeys] blocks index (i - 1) using 1:3 with linespoints lt i dt 2 pt 6 notitle, \
     for [i = 1:nkeys] blocks index (i - 1) using 1:2 with linespoints lt i dt 1 notitle
eval legend_setup
plot -1 notitle, for [i = 1:nkeys] keyentry with linespoints lt i title key(i), \
     keyentry with linespoints lt 8 dt 2 pt 6 title 'cold', \
     keyentry with linespoints lt 8 dt 1 pt 7 title 'reused'
unset multiplot
