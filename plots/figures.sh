# plots/figures.sh: which figure scripts an experiment has, for render.sh and
# report.sh (sourced by both; PLOTS is the plots directory).
#
# An experiment NAME has the figures plots/NAME-FIG.gp (each with its query
# NAME-FIG.sql). A probe experiment (NAME = probe-*: kvreplay probe of live
# servers, docs/probe.md) also has the figures every probe run has,
# plots/probe-all-FIG.gp, drawn as NAME-FIG.

# fig_scripts NAME: its figure scripts, one path a line.
fig_scripts() {
    for _gp in "$PLOTS/$1"-*.gp; do
        [ -f "$_gp" ] && printf '%s\n' "$_gp"
    done
    case "$1" in
    probe-all) ;;
    probe-*) for _gp in "$PLOTS"/probe-all-*.gp; do [ -f "$_gp" ] && printf '%s\n' "$_gp"; done ;;
    esac
    return 0
}

# fig_name NAME SCRIPT: the name of the figure SCRIPT draws for NAME.
fig_name() {
    _b=$(basename "$2" .gp)
    case "$_b" in
    probe-all-*) printf '%s-%s\n' "$1" "${_b#probe-all-}" ;;
    *) printf '%s\n' "$_b" ;;
    esac
}
