-- plots/lib.sql: the temporary views every figure and table query reads.
--
-- Read by render.sh and report.sh before each query, on a database opened
-- read-only; the views live in the connection's temp schema, so the results
-- database is never written. The caller first creates the view
--     fig_runs = the sel_runs rows that one figure or table plots
-- (the filter in its `-- runs:` header line, "1" when it has none).
--
-- sel_runs: one run per (variant, sweep_name, sweep_value): among the runs
--   with at least one request, a finished ('done') one before an unfinished
--   one, then the latest (largest run_id). So a re-run at a new build replaces
--   the old numbers instead of mixing with them, a run that crashed before
--   its first request is ignored, and a run still in progress is plotted only
--   while no finished one exists.
-- req: the requests of the runs in fig_runs, with their run's configuration
--   and derived columns:
--     label         the run's variant, or "run ID" without one (legend text;
--                   the caption files give each run's quirks and rules)
--     run_name      label and, for a numeric sweep, " NAME=VALUE" ('|' shown
--                   as '/'): the "run" column of the report's tables
--     vorder        the smallest run_id of the variant in fig_runs (series
--                   order in legends and tables = the order the runs were made)
--     anchor_write  ms spent writing the disk anchor: requests.anchor_ms, or
--                   extra's $.anchor_ms when the column is NULL; 0 when neither
--     first_idx     the req_index of the first request of this request's session
--     session_no    1, 2, ...: the sessions of the run in the order they start
--     anchor_at     requests.anchor_pos, or extra's $.anchor_pos; NULL when
--                   neither, or 0 (the store writes 0 when no anchor was written)
--   (and, for kvreplay probe's rows, reuse_expected, reuse_reported,
--   json_equal, error and verified as stored)
-- ttft_p50: per run of fig_runs and scope (followup 0: every request; 1: the
--   follow-up requests, turn > 0), the median over requests (the middle
--   value, or the mean of the two middle ones; NULL when the scope has no
--   timed request), in ms, of:
--     cold_p50, reuse_p50         the measured TTFT (per request the median of
--                                 its --repeat timings, or its one timing)
--     cold_lo, cold_hi,           the fastest and slowest of each request's
--     reuse_lo, reuse_hi          timings (its one timing without --repeat):
--                                 the band a figure draws around the median
--     model_cold_p50,             the modeled TTFT (work priced at the run's
--     model_reuse_p50             calibration: deterministic at a reference one)
-- cum_ttft: per request in replay order, the cumulative TTFT (s) of a series:
--   each variant's reused path (sum of ttft_reuse_ms; part 0), then per model
--   family (the variant's part before '/') the cold path (sum of the family's
--   mean ttft_cold_ms per request, series "FAMILY cold"; part 1). Columns:
--   part, o (series order), series, req_index, s.
-- Only columns documented in docs/sqlite.md are used.
CREATE TEMP VIEW sel_runs AS
SELECT * FROM (
    SELECT r.*,
           row_number() OVER (PARTITION BY r.variant, r.sweep_name, r.sweep_value
                              ORDER BY (r.status = 'done') DESC, r.run_id DESC) AS pick
    FROM runs r
    WHERE EXISTS (SELECT 1 FROM requests q WHERE q.run_id = r.run_id)
) WHERE pick = 1;

CREATE TEMP VIEW req AS
SELECT *, dense_rank() OVER (PARTITION BY run_id ORDER BY first_idx) AS session_no FROM (
SELECT q.run_id, q.req_index, q.session, q.turn, q.n_prompt, q.n_reused, q.n_prefilled,
       q.ttft_cold_ms, q.ttft_reuse_ms, q.ttft_cold_min_ms, q.ttft_cold_max_ms, q.ttft_reuse_min_ms,
       q.ttft_reuse_max_ms, q.model_cold_ms, q.model_reuse_ms, q.flops_cold, q.flops_reuse, q.bytes_restored,
       q.logits_equal, q.decode_equal, q.state_equal, q.fork_step,
       q.n_decode, q.max_ulp, q.miss_pos, q.miss_where, q.cache_bytes, q.cache_entries,
       coalesce(q.verified, 1) AS verified,
       q.reuse_expected, q.reuse_reported, q.json_equal, q.error,
       coalesce(q.anchor_ms,
                CASE WHEN json_valid(q.extra) THEN json_extract(q.extra, '$.anchor_ms') END,
                0) AS anchor_write,
       nullif(coalesce(q.anchor_pos,
                       CASE WHEN json_valid(q.extra) THEN json_extract(q.extra, '$.anchor_pos') END),
              0) AS anchor_at,
       f.variant, f.sweep_name, f.sweep_value, f.model_name, f.policy, f.quirks, f.normalize,
       f.align, f.chunk, f.ubatch, f.kernel, f.precision, f.block_size, f.cap_prompt, f.vorder, f.n_repeat,
       f.price_gflops, f.price_restore_gbs, f.price_source,
       coalesce(f.variant, 'run ' || f.run_id) AS label,
       replace(coalesce(f.variant, 'run ' || f.run_id)
               || CASE WHEN f.sweep_name IS NOT NULL AND f.sweep_value IS NOT NULL
                       THEN ' ' || f.sweep_name || '=' || printf('%g', f.sweep_value) ELSE '' END,
               '|', '/') AS run_name,
       min(q.req_index) OVER (PARTITION BY q.run_id, q.session) AS first_idx
FROM requests q JOIN fig_runs f USING (run_id));

CREATE TEMP VIEW ttft_p50 AS
WITH
per AS (SELECT run_id, turn, ttft_cold_ms AS c, ttft_reuse_ms AS r,
               coalesce(ttft_cold_min_ms, ttft_cold_ms) AS c_lo, coalesce(ttft_cold_max_ms, ttft_cold_ms) AS c_hi,
               coalesce(ttft_reuse_min_ms, ttft_reuse_ms) AS r_lo, coalesce(ttft_reuse_max_ms, ttft_reuse_ms) AS r_hi,
               model_cold_ms AS mc, model_reuse_ms AS mr FROM req),
scoped AS (SELECT run_id, 0 AS followup, * FROM per UNION ALL SELECT run_id, 1, * FROM per WHERE turn > 0),
long AS (SELECT run_id, followup, 'c' AS k, c AS x FROM scoped
         UNION ALL SELECT run_id, followup, 'r', r FROM scoped
         UNION ALL SELECT run_id, followup, 'c_lo', c_lo FROM scoped
         UNION ALL SELECT run_id, followup, 'c_hi', c_hi FROM scoped
         UNION ALL SELECT run_id, followup, 'r_lo', r_lo FROM scoped
         UNION ALL SELECT run_id, followup, 'r_hi', r_hi FROM scoped
         UNION ALL SELECT run_id, followup, 'mc', mc FROM scoped
         UNION ALL SELECT run_id, followup, 'mr', mr FROM scoped),
ranked AS (SELECT run_id, followup, k, x,
                  row_number() OVER (PARTITION BY run_id, followup, k ORDER BY x) AS i,
                  count(*) OVER (PARTITION BY run_id, followup, k) AS n
           FROM long WHERE x IS NOT NULL),
p50 AS (SELECT run_id, followup, k, avg(x) AS v FROM ranked WHERE i IN ((n + 1) / 2, (n + 2) / 2)
        GROUP BY run_id, followup, k)
SELECT g.run_id, g.followup,
       max(CASE WHEN k = 'c' THEN v END) AS cold_p50, max(CASE WHEN k = 'r' THEN v END) AS reuse_p50,
       max(CASE WHEN k = 'c_lo' THEN v END) AS cold_lo, max(CASE WHEN k = 'c_hi' THEN v END) AS cold_hi,
       max(CASE WHEN k = 'r_lo' THEN v END) AS reuse_lo, max(CASE WHEN k = 'r_hi' THEN v END) AS reuse_hi,
       max(CASE WHEN k = 'mc' THEN v END) AS model_cold_p50, max(CASE WHEN k = 'mr' THEN v END) AS model_reuse_p50
FROM (SELECT DISTINCT run_id, followup FROM scoped) g LEFT JOIN p50 USING (run_id, followup)
GROUP BY g.run_id, g.followup;

CREATE TEMP VIEW cum_ttft AS
WITH v AS (SELECT *, CASE WHEN instr(variant, '/') > 0 THEN substr(variant, 1, instr(variant, '/') - 1)
                          ELSE coalesce(variant, 'run ' || run_id) END AS fam
           FROM req),
reused AS (SELECT 0 AS part, vorder AS o, label AS series, req_index,
                  sum(ttft_reuse_ms) OVER (PARTITION BY run_id ORDER BY req_index) / 1000.0 AS s
           FROM v WHERE ttft_reuse_ms IS NOT NULL),
coldm AS (SELECT fam, min(vorder) AS o, req_index, avg(ttft_cold_ms) AS c
          FROM v WHERE ttft_cold_ms IS NOT NULL GROUP BY fam, req_index),
cold AS (SELECT 1 AS part, o, fam || ' cold' AS series, req_index,
                sum(c) OVER (PARTITION BY fam ORDER BY req_index) / 1000.0 AS s
         FROM coldm)
SELECT * FROM reused UNION ALL SELECT * FROM cold;
