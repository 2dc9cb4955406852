# caption: Reuse fraction of every request in replay order (tokens the server reused / prompt tokens), one panel per live server: what it reported (solid) and what its cache rule gives on the longest common prefix with what it held (dashed), counted on the token ids it was sent or read back from it; probe's --normalize, if any, is in the caption's rules.
# probe-*-reuse: blocks in pairs per variant: reported, expected; columns:
# 1 request number, 2 reuse fraction (empty: not reported, or a failed request).
set multiplot title sprintf('%s: reuse the server reported against the reuse expected', exp_name)
nv = nkeys / 2
set yrange [-0.02:1.02]
set ytics 0, 0.2, 1
set format y '%.1f'
set xrange [0.5:*]
stats blocks index 0 using 1 nooutput
xstep = STATS_max <= 12 ? 1 : 5
set xtics xstep
set format x '%g'
set xlabel 'request'
set tmargin at screen 0.74
panel_l = 0.09
panel_gap = 0.035
do for [v = 1:nv] {
    eval panel(v, nv)
    set title substr(key(2 * v - 1), 1, strstrt(key(2 * v - 1), ': reported') - 1) offset 0, -0.6 font smallfont
    set ylabel (v == 1 ? 'reuse fraction (reused / prompt)' : '')
    set format y (v == 1 ? '%.1f' : '')
    plot blocks index (2 * v - 1) using 1:2 with linespoints lt 2 dt 2 pt 6 notitle, \
         blocks index (2 * v - 2) using 1:2 with linespoints lt 1 dt 1 pt 7 notitle
}
eval legend_setup
plot -1 notitle, keyentry with linespoints lt 1 dt 1 pt 7 title 'reported by the server', \
     keyentry with linespoints lt 2 dt 2 pt 6 title 'expected of its cache rule'
unset multiplot
