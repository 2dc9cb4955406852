# caption: Time to first token of every request in replay order, one panel per live server, measured by kvreplay probe from the moment the request was sent to the first streamed event that carried a token: the forced cold run (dashed, open points) and the warm run through the server's cache (solid), with the min-max band of --repeat's timings. Wall-clock on a shared machine: compare the two curves of one server, not servers.
# probe-*-ttft: blocks in pairs per variant: cold, warm; columns: 1 request number, 2 TTFT ms, 3 min, 4 max.
set multiplot title sprintf('%s: TTFT cold against warm', exp_name)
nv = nkeys / 2
stats blocks index 0 using 1 nooutput
set xrange [0.5:STATS_max + 0.5]
xstep = STATS_max <= 12 ? 1 : 5
set xtics xstep
set format x '%g'
set xlabel 'request'
set logscale y 10
stats data using 4 nooutput
ylo = STATS_min
stats data using 5 nooutput
set yrange [ylo / 1.3:STATS_max * 1.3]
set tmargin at screen 0.74
panel_l = 0.1
panel_gap = 0.035
do for [v = 1:nv] {
    eval panel(v, nv)
    set title substr(key(2 * v), 1, strstrt(key(2 * v), ': warm') - 1) offset 0, -0.6 font smallfont
    set ylabel (v == 1 ? 'TTFT (ms, log)' : '')
    set format y (v == 1 ? '%g' : '')
    plot blocks index (2 * v - 2) using 1:3:4 with filledcurves lt 2 fs transparent solid 0.15 noborder notitle, \
         blocks index (2 * v - 1) using 1:3:4 with filledcurves lt 1 fs transparent solid 0.15 noborder notitle, \
         blocks index (2 * v - 2) using 1:2 with linespoints lt 2 dt 2 pt 6 notitle, \
         blocks index (2 * v - 1) using 1:2 with linespoints lt 1 dt 1 pt 7 notitle
}
eval legend_setup
plot -1 notitle, keyentry with linespoints lt 2 dt 2 pt 6 title 'cold (forced)', \
     keyentry with linespoints lt 1 dt 1 pt 7 title 'warm (through the cache)'
unset multiplot
