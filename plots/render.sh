#!/bin/sh
# plots/render.sh: `make plots`. Renders every experiment database under
# results/ into figures, then writes results/REPORT.md (plots/report.sh).
#
#   sh plots/render.sh
#
# For each NAME in $EXPERIMENTS whose $RESULTS_DIR/NAME.sqlite exists and
# holds a run with requests, and for each figure script plots/NAME-FIG.gp
# (and, for a probe experiment NAME = probe-*, plots/probe-all-FIG.gp drawn
# as NAME-FIG: plots/figures.sh):
#   1. plots/NAME-FIG.sql is run on the database, opened read-only, after
#      plots/lib.sql (temp views sel_runs, req) and the view fig_runs = the
#      sel_runs rows matching the SQL file's "-- runs: EXPR" line (all when
#      there is none). Rows are tab-separated, column 1 the series name.
#   2. gnuplot draws plots/common.gp + plots/NAME-FIG.gp twice:
#      $FIG_DIR/NAME-FIG.png (1200x700) and NAME-FIG.pdf (6x3.5 in).
#   3. $FIG_DIR/NAME-FIG.txt gets the caption: the gp script's "# caption:"
#      line, the database, and the runs' configuration (plots/caption.sql).
#   4. With DATA_DIR set, $DATA_DIR/NAME-FIG.tsv keeps the query's rows, as
#      gnuplot read them (the numbers each figure plots).
# A figure whose query returns no rows is skipped (with a note); a missing
# database or one without requests is skipped. Files are rendered into a
# staging directory and renamed into $FIG_DIR only when the experiment's
# figures all succeeded; its stale NAME-* figures (and data files) are then
# removed.
#
# Environment (defaults): RESULTS_DIR (results), FIG_DIR ($RESULTS_DIR/figures),
# DATA_DIR (unset: the rows are not kept), EXPERIMENTS (every
# experiments/NAME.json), SQLITE3 (sqlite3), GNUPLOT (gnuplot), FULL_DIR
# ($RESULTS_DIR/full; empty: none), NO_REPORT (set: no REPORT.md), FULL_ONLY
# (set: draw the full-scale databases only, and rewrite only that part of
# REPORT.md); report.sh
# also reads KVREPLAY (build/kvreplay).
# results/bench.json is not rendered.
#
# Exit status: 0 when every present experiment rendered; 1 (with a message
# naming the file) when a tool is missing, a query fails or gnuplot fails.
set -eu

RESULTS_DIR=${RESULTS_DIR:-results}
FIG_DIR=${FIG_DIR:-$RESULTS_DIR/figures}
DATA_DIR=${DATA_DIR:-}
SQLITE3=${SQLITE3:-sqlite3}
GNUPLOT=${GNUPLOT:-gnuplot}
PLOTS=$(cd "$(dirname "$0")" && pwd)
# every experiment spec by default, experiments/NAME.json, in name order
EXPERIMENTS=${EXPERIMENTS:-$(cd "$PLOTS/../experiments" && for s in *.json; do echo "${s%.json}"; done)}
export RESULTS_DIR FIG_DIR EXPERIMENTS SQLITE3

die() { echo "plots/render.sh: $*" >&2; exit 1; }
note() { echo "plots/render.sh: $*" >&2; }

. "$PLOTS/figures.sh"

command -v "$SQLITE3" >/dev/null 2>&1 || die "$SQLITE3: not found (install the Debian package sqlite3)"
command -v "$GNUPLOT" >/dev/null 2>&1 || die "$GNUPLOT: not found (install the Debian package gnuplot-nox)"
[ -d "$RESULTS_DIR" ] || die "$RESULTS_DIR: no such directory (run the experiments first: make demo)"
mkdir -p "$FIG_DIR" || die "$FIG_DIR: cannot create"
[ -z "$DATA_DIR" ] || mkdir -p "$DATA_DIR" || die "$DATA_DIR: cannot create"

TAB=$(printf '\t')
work=$(mktemp -d "${TMPDIR:-/tmp}/kvreplay-plots.XXXXXX") || die "cannot create a temporary directory"
stage="$FIG_DIR/.stage.$$"
cleanup() { rm -rf "$work" "$stage"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# query DB FILTER SQLFILE [sqlite3 options...]: the rows of SQLFILE on DB
# (read-only) after lib.sql, with fig_runs = the sel_runs rows where FILTER.
query() {
    _db=$1 _filter=$2 _sql=$3
    shift 3
    _pre=/dev/null  # an older schema gets the current columns through temp views
    _v=$("$SQLITE3" -readonly -batch "$_db" 'PRAGMA user_version')
    [ -f "$PLOTS/compat-v$_v.sql" ] && _pre=$PLOTS/compat-v$_v.sql
    "$SQLITE3" -readonly -batch -bail "$@" "$_db" \
        ".read '$_pre'" \
        ".read '$PLOTS/lib.sql'" \
        "CREATE TEMP VIEW fig_runs AS SELECT s.*, min(s.run_id) OVER (PARTITION BY s.variant) AS vorder FROM sel_runs s WHERE ($_filter);" \
        ".read '$_sql'"
}

# The "-- runs: EXPR" filter of a SQL file ("1": every selected run).
runs_filter() {
    _f=$(sed -n 's/^-- runs: *//p' "$1" | head -n 1)
    echo "${_f:-1}"
}

printf 'SELECT count(*) + (SELECT count(*) FROM pragma_table_info('"'"'sim_runs'"'"')) FROM req;\n' >"$work/count.sql"
rendered=0
# FULL_ONLY=1: the experiments' demo databases are left as they are (only the full-scale part is drawn)
_demo_list=$EXPERIMENTS
[ -z "${FULL_ONLY:-}" ] || _demo_list=""
for name in $_demo_list; do
    db="$RESULTS_DIR/$name.sqlite"
    if [ ! -f "$db" ]; then
        note "$name: $db absent, skipped"
        continue
    fi
    n=$(query "$db" 1 "$work/count.sql" -noheader 2>"$work/err") \
        || die "$db: cannot read: $(cat "$work/err")"
    if [ "${n:-0}" -eq 0 ]; then
        note "$name: $db has no run with requests, skipped"
        continue
    fi
    rm -rf "$stage"
    mkdir -p "$stage"
    made=""
    fig_scripts "$name" >"$work/scripts"
    while IFS= read -r gp <&3; do
        fig=$(fig_name "$name" "$gp")
        sql="${gp%.gp}.sql"
        [ -f "$sql" ] || die "$gp: its query $sql is missing"
        filter=$(runs_filter "$sql")
        query "$db" "$filter" "$sql" -noheader -list -separator "$TAB" \
            >"$work/$fig.tsv" 2>"$work/err" \
            || die "$sql: query failed on $db: $(cat "$work/err")"
        if [ ! -s "$work/$fig.tsv" ]; then
            note "$fig: no rows in $db for this figure, skipped"
            continue
        fi
        # Split into one block per series; keys = the series names, quoted.
        awk -F "$TAB" -v blocks="$work/$fig.blocks" -v keysf="$work/$fig.keys" '
            { k = $1; r = substr($0, length($1) + 2)
              if (!(k in seen)) { seen[k] = ++nk; name[nk] = k }
              buf[seen[k]] = buf[seen[k]] r "\n" }
            END { for (i = 1; i <= nk; i++) {
                      printf "%s%s", (i > 1 ? "\n\n" : ""), buf[i] > blocks
                      kk = name[i]; gsub(/["\047\\]/, "", kk)
                      printf "%s\"%s\"", (i > 1 ? " " : ""), kk > keysf }
                  printf "\n" > keysf }' "$work/$fig.tsv" \
            || die "$fig: cannot split $work/$fig.tsv into series"
        keys=$(cat "$work/$fig.keys")
        for fmt in png pdf; do
            "$GNUPLOT" -e "fmt='$fmt'; out='$stage/$fig'; data='$work/$fig.tsv'; blocks='$work/$fig.blocks'; keys='$keys'; exp_name='$name'" \
                "$PLOTS/common.gp" "$gp" >"$work/gp.out" 2>&1 \
                || die "$gp: gnuplot failed drawing $fig.$fmt from $db:
$(cat "$work/gp.out")"
            [ -s "$work/gp.out" ] && sed "s|^|plots/render.sh: $fig.$fmt: gnuplot: |" "$work/gp.out" >&2
            [ -s "$stage/$fig.$fmt" ] || die "$gp: gnuplot wrote no $fig.$fmt"
        done
        {
            printf '%s: %s\n' "$fig" "$(sed -n 's/^# caption: *//p' "$gp" | head -n 1)"
            printf 'Data: %s\n' "$db"
            _cap=$PLOTS/caption.sql  # an experiment's own caption query when it has one (traces)
            [ -f "$PLOTS/$name-caption.sql" ] && _cap=$PLOTS/$name-caption.sql
            query "$db" "$filter" "$_cap" -noheader -list 2>"$work/err" \
                || die "$_cap: query failed on $db: $(cat "$work/err")"
        } >"$stage/$fig.txt"
        [ -z "$DATA_DIR" ] || cp "$work/$fig.tsv" "$stage/$fig.tsv" || die "$stage/$fig.tsv: cannot write"
        made="$made $fig"
    done 3<"$work/scripts"
    # Publish: rename into FIG_DIR, then drop this experiment's stale figures.
    for fig in $made; do
        for ext in png pdf txt; do
            mv -f "$stage/$fig.$ext" "$FIG_DIR/$fig.$ext" || die "$FIG_DIR/$fig.$ext: cannot write"
        done
        [ -z "$DATA_DIR" ] || mv -f "$stage/$fig.tsv" "$DATA_DIR/$fig.tsv" || die "$DATA_DIR/$fig.tsv: cannot write"
    done
    for old in "$FIG_DIR/$name"-*.png "$FIG_DIR/$name"-*.pdf "$FIG_DIR/$name"-*.txt \
               ${DATA_DIR:+"$DATA_DIR/$name"-*.tsv}; do
        [ -f "$old" ] || continue
        base=$(basename "$old"); base=${base%.*}
        case " $made " in *" $base "*) ;; *) rm -f "$old" ;; esac
    done
    note "$name: $(echo $made | wc -w) figures in $FIG_DIR:$made"
    rendered=$((rendered + 1))
done
[ "$rendered" -gt 0 ] || [ -n "${FULL_ONLY:-}" ] || note "no experiment database with requests under $RESULTS_DIR"

# The full-scale databases, $FULL_DIR/NAME.sqlite (default $RESULTS_DIR/full;
# docs/scale.md), are rendered the same way into $FULL_DIR/figures; report.sh
# gives them their own part of REPORT.md.
FULL_DIR=${FULL_DIR-$RESULTS_DIR/full}
if [ -n "$FULL_DIR" ] && ls "$FULL_DIR"/*.sqlite >/dev/null 2>&1; then
    RESULTS_DIR=$FULL_DIR FIG_DIR=$FULL_DIR/figures FULL_DIR='' NO_REPORT=1 FULL_ONLY='' \
        DATA_DIR=${DATA_DIR:+$DATA_DIR/full} sh "$PLOTS/render.sh" || die "$FULL_DIR: rendering failed"
fi
[ -n "${NO_REPORT:-}" ] || sh "$PLOTS/report.sh" || die "plots/report.sh failed"
