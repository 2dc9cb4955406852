# caption: Per variant of the agent loop: left, the median (p50) time to first token of the cold and the reused run; right, the tokens prefilled over all requests by the cold run (every prompt token) and by the reused run (quirk = full-reprocess re-prefills everything).
# seed002-summary: one row per variant (blocks = one per variant, one row
# each); data columns: 1 variant, 2 TTFT p50 cold ms, 3 TTFT p50 reused ms,
# 4 prompt tokens, 5 prefilled tokens, 6 requests.
set multiplot title 'seed002: median TTFT and prefilled tokens per variant'
panel_l = 0.11
panel_gap = 0.12
set bmargin at screen 0.24
set xlabel 'variant'
set xtics rotate by 20 right scale 0
set grid noxtics
stats data using 2 nooutput
n = STATS_records
set xrange [-0.6:n - 0.4]
set style fill solid 0.85 border -1

eval panel(1, 2)
set ylabel 'TTFT p50 (ms)'
set yrange [0:*]
plot data using ($0 - 0.2):2:(0.38):xtic(1) with boxes lt 8 notitle, \
     ''   using ($0 + 0.2):3:(0.38) with boxes lt 1 notitle

eval panel(2, 2)
set ylabel 'prefilled tokens, all requests (x1000)'
plot data using ($0 - 0.2):($4 / 1000.0):(0.38):xtic(1) with boxes lt 8 notitle, \
     ''   using ($0 + 0.2):($5 / 1000.0):(0.38) with boxes lt 1 notitle

eval legend_setup
plot -1 notitle, keyentry with boxes lt 8 title 'cold run (prefills every prompt token)', \
     keyentry with boxes lt 1 title 'reused run'
unset multiplot
