# plots/common.gp: the shared style of every kvreplay figure.
#
# render.sh runs `gnuplot -e "VARS" plots/common.gp plots/NAME-FIG.gp`
# twice per figure, once per format, with these variables set:
#   fmt     'png' (1200x700 px) or 'pdf' (6 x 3.5 in), the same drawing
#   out     output path without extension (common.gp adds .png / .pdf)
#   data    the query's rows, tab-separated, column 1 = the series name
#   blocks  the same rows without column 1, one data block per series (in
#           order of first appearance), so `index i-1` is series i
#   keys    the series names as a gnuplot word list ('"a" "b c"'):
#           words(keys) series, word(keys, i) the name of series i
#   exp_name the experiment (a script shared by several, plots/probe-all-*)
# Figure scripts set titles, labels (with units), ranges and the plot; the
# style below (fonts, colours, line widths, grid, legend) is the same in all.

if (!exists("fmt")) fmt = 'png'
if (!exists("keys")) keys = ''
if (!exists("exp_name")) exp_name = ''

# Sized for a paper: 1200x700 px PNG and 6x3.5 in PDF, fonts that stay
# legible when the figure is scaled to one column.
if (fmt eq 'pdf') {
    set terminal pdfcairo size 6in,3.5in font 'DejaVu Sans,12' linewidth 1.0 rounded noenhanced
} else {
    if (fmt eq 'png') {
        set terminal pngcairo size 1200,700 font 'DejaVu Sans,18' linewidth 2.0 rounded noenhanced
    } else {
        print sprintf('common.gp: unknown fmt %s (png or pdf)', fmt)
        exit status 1
    }
}
set output out.'.'.fmt

set datafile separator "\t"
set datafile missing ''

# Okabe-Ito colour-blind-safe palette; distinct point types per series
# (pdfcairo draws points larger than pngcairo: psz evens them out).
psz = (fmt eq "pdf") ? 0.6 : 1.0
set linetype 1 lc rgb '#0072B2' lw 1.6 pt 7  ps 1.0 * psz dt 1
set linetype 2 lc rgb '#D55E00' lw 1.6 pt 5  ps 1.0 * psz dt 1
set linetype 3 lc rgb '#009E73' lw 1.6 pt 9  ps 1.2 * psz dt 1
set linetype 4 lc rgb '#CC79A7' lw 1.6 pt 11 ps 1.2 * psz dt 1
set linetype 5 lc rgb '#E69F00' lw 1.6 pt 13 ps 1.1 * psz dt 1
set linetype 6 lc rgb '#56B4E9' lw 1.6 pt 15 ps 1.1 * psz dt 1
set linetype 7 lc rgb '#000000' lw 1.6 pt 4  ps 1.0 * psz dt 1
set linetype 8 lc rgb '#999999' lw 1.6 pt 6  ps 1.0 * psz dt 1
set linetype cycle 8
grey = '#7f7f7f'

set border 3 lw 1.0
set tics nomirror out scale 0.6
set grid back xtics ytics lc rgb '#dddddd' lw 0.8 dt 1
unset key
set style fill solid 0.85 border -1
set offsets 0, 0, 0, 0
set autoscale xfix

nkeys = words(keys)
key(i) = word(keys, i)
# Series whose name ends in "cold" are reference lines (drawn dashed, grey).
iscold(i) = strstrt(key(i), 'cold') > 0
# Bars: x offset of series i of n inside a group of width 0.8 at integer x.
barw(n) = 0.8 / n
baroff(i, n) = (i - (n + 1) / 2.0) * barw(n)
# Tick label for a token count: 2048 -> 2k, 32768 -> 32k, 100 -> 100.
toklabel(x) = (x >= 1024 && int(x) % 1024 == 0) ? sprintf('%dk', int(x) / 1024) : sprintf('%g', x)

# Layout: every figure is a multiplot whose title sits at the top of the
# canvas, a legend row below it, and the plot area(s) below that. These
# margins are the single-panel defaults; multi-panel figures pass their own
# to `set multiplot layout`.
set lmargin at screen 0.115
set rmargin at screen 0.97
set bmargin at screen 0.14
set tmargin at screen 0.80

# The legend row, drawn last as a panel of its own (gnuplot's key cannot be
# wider than one panel, and this one spans the figure):
#     eval legend_setup
#     plot -1 notitle, keyentry with linespoints lt 1 title 'a', ...
# legend_setup clears the axes, so it must follow the data panels.
legend_setup = "set lmargin at screen 0.02; set rmargin at screen 0.98; " . \
    "set tmargin at screen 0.925; set bmargin at screen 0.825; " . \
    "unset border; unset tics; unset xlabel; unset ylabel; unset title; unset grid; " . \
    "unset logscale; unset object; unset label; unset arrow; unset offsets; " . \
    "set xrange [0:1]; set yrange [0:1]; " . \
    "set key center center horizontal reverse Left nobox noenhanced samplen 3 width 0.5 spacing 1.1"

# Cumulative series (seed002): `eval cumulative_plot` draws blocks whose
# series are variants (lines with points) followed by "FAMILY cold" series
# (grey reference lines, dashed), then the legend row.
cumulative_plot = "ncold = 0; do for [i = 1:nkeys] { if (iscold(i)) { ncold = ncold + 1 } }; nvar = nkeys - ncold; " . \
    "plot for [i = 1:nvar] blocks index (i - 1) using 1:2 with linespoints lt i notitle, " . \
    "for [i = nvar + 1:nkeys] blocks index (i - 1) using 1:2 with lines lt 8 lw 2 dt i-nvar+1 notitle; " . \
    "eval legend_setup; " . \
    "plot -1 notitle, for [i = 1:nvar] keyentry with linespoints lt i title key(i), " . \
    "for [i = nvar + 1:nkeys] keyentry with lines lt 8 lw 2 dt i-nvar+1 title key(i)"

# Panels side by side: `eval panel(i, n)` sets the left/right margins of
# panel i of n between panel_l and panel_r with panel_gap between panels
# (set those three first when the defaults do not fit the tick labels).
panel_l = 0.115
panel_r = 0.98
panel_gap = 0.10
panel_w(n) = (panel_r - panel_l - (n - 1) * panel_gap) / n
panel(i, n) = sprintf("set lmargin at screen %g; set rmargin at screen %g", \
    panel_l + (i - 1) * (panel_w(n) + panel_gap), panel_l + (i - 1) * (panel_w(n) + panel_gap) + panel_w(n))
# Font for value labels inside a plot (a little smaller than the text).
smallfont = (fmt eq 'pdf') ? 'DejaVu Sans,9' : 'DejaVu Sans,14'
