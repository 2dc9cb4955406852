-- tab-seed004-report: the issue report's own table (seeds/004: context size,
-- cold prefill, cache reuse of the second query, speedup, status), one row per
-- context length (sweep_value) of the runs in fig_runs, quirk and fixed side
-- by side. Q1 is the first request (turn 0: both variants prefill it whole,
-- its cold TTFT is the report's "cold prefill"), Q2 the second (turn 1: the
-- report's "cache reuse (Q2)"); measured (wall clock on this machine, s) and
-- modeled (the work priced at the run's calibration, s). "reuse" is the reuse
-- fraction of the follow-up requests (turn > 0); a variant whose follow-ups
-- reuse under 10% of their prompts "re-prefills everything". identical: the
-- requests bit-identical to cold over both variants (logits, decode, state).
-- A run that has not stored all its requests is marked "partial: K of N".
WITH per AS (
    SELECT run_id, min(variant) AS v, min(sweep_value) AS ctx, count(*) AS n,
           (SELECT n_requests FROM fig_runs f WHERE f.run_id = req.run_id) AS planned,
           max(CASE WHEN turn = 0 THEN n_prompt END) AS np,
           max(CASE WHEN turn = 0 THEN ttft_cold_ms END) / 1e3 AS q1_cold,
           max(CASE WHEN turn = 0 THEN model_cold_ms END) / 1e3 AS q1_cold_m,
           max(CASE WHEN turn = 1 THEN ttft_reuse_ms END) / 1e3 AS q2,
           max(CASE WHEN turn = 1 THEN model_reuse_ms END) / 1e3 AS q2_m,
           max(CASE WHEN turn = 1 THEN model_cold_ms END) / 1e3 AS q2_cold_m,
           1.0 * sum(CASE WHEN turn > 0 THEN n_reused END) / nullif(sum(CASE WHEN turn > 0 THEN n_prompt END), 0) AS rf,
           sum(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1) AS ident
    FROM req WHERE sweep_value IS NOT NULL GROUP BY run_id),
ctx AS (SELECT DISTINCT ctx FROM per),
q AS (SELECT * FROM per WHERE v = 'quirk'),
f AS (SELECT * FROM per WHERE v = 'fixed')
SELECT printf('%gK', c.ctx / 1000) AS "context",
       coalesce(q.np, f.np) AS "prompt tokens",
       CASE WHEN coalesce(q.q1_cold, f.q1_cold) IS NULL THEN '-'
            ELSE printf('%.1f / %.1f', coalesce(q.q1_cold, f.q1_cold), coalesce(q.q1_cold_m, f.q1_cold_m)) END
           AS "cold prefill Q1, s (measured / modeled)",
       CASE WHEN q.q2 IS NULL THEN '-' ELSE printf('%.1f / %.1f', q.q2, q.q2_m) END AS "quirk: reuse Q2, s",
       CASE WHEN q.rf IS NULL THEN '-' WHEN q.rf < 0.1 THEN printf('re-prefills everything (%.3f)', q.rf)
            ELSE printf('reuses (%.3f)', q.rf) END
       || CASE WHEN q.n < q.planned THEN printf(', partial: %d of %d', q.n, q.planned) ELSE '' END AS "quirk: status (reuse)",
       CASE WHEN f.q2 IS NULL THEN '-' ELSE printf('%.1f / %.1f', f.q2, f.q2_m) END AS "fixed: reuse Q2, s",
       CASE WHEN f.rf IS NULL THEN '-' WHEN f.rf < 0.1 THEN printf('re-prefills everything (%.3f)', f.rf)
            ELSE printf('reuses (%.3f)', f.rf) END
       || CASE WHEN f.n < f.planned THEN printf(', partial: %d of %d', f.n, f.planned) ELSE '' END AS "fixed: status (reuse)",
       CASE WHEN q.q2_m > 0 THEN printf('%.1fx', coalesce(q.q2_cold_m, f.q2_cold_m) / q.q2_m) ELSE '-' END || ' / ' ||
       CASE WHEN f.q2_m > 0 THEN printf('%.1fx', coalesce(f.q2_cold_m, q.q2_cold_m) / f.q2_m) ELSE '-' END
           AS "speedup Q2 modeled (quirk / fixed)",
       printf('%d of %d', coalesce(q.ident, 0) + coalesce(f.ident, 0), coalesce(q.n, 0) + coalesce(f.n, 0))
           AS "bit-identical"
FROM ctx c LEFT JOIN q ON q.ctx = c.ctx LEFT JOIN f ON f.ctx = c.ctx
ORDER BY c.ctx;
