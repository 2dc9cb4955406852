-- tab-summary: the key table of every experiment, one row per run in
-- fig_runs (report.sh passes the filter): run (variant and sweep value),
-- requests, reuse fraction = sum(n_reused) / sum(n_prompt), tokens
-- prefilled by the reused run, TTFT p50 cold and reused (ms; the middle
-- value or the mean of the two middle ones), TTFT sums (s), % bit-identical
-- (logits_equal AND decode_equal AND state_equal not 0, over the verified rows:
-- every replay row; a serve run's rows without --verify are not compared),
-- % of generations forked.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(run_name) AS rn,
               min(sweep_value) AS sv, count(*) AS n, sum(n_prompt) AS np, sum(n_reused) AS nr,
               sum(n_prefilled) AS npf, sum(ttft_cold_ms) / 1000.0 AS cs,
               sum(ttft_reuse_ms) / 1000.0 AS rs,
               100.0 * avg(CASE WHEN verified = 1
                                THEN logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1 END) AS ident,
               100.0 * sum(fork_step IS NOT NULL) / nullif(sum(n_decode > 0), 0) AS forked
        FROM req GROUP BY run_id)
SELECT per.rn AS "run",
       per.n AS "requests",
       printf('%.3f', 1.0 * per.nr / nullif(per.np, 0)) AS "reuse fraction",
       per.npf AS "prefilled tokens",
       CASE WHEN (t.cold_p50) IS NULL THEN '-' ELSE printf('%.2f', t.cold_p50) END AS "TTFT p50 cold (ms)",
       CASE WHEN (t.reuse_p50) IS NULL THEN '-' ELSE printf('%.2f', t.reuse_p50) END AS "TTFT p50 reused (ms)",
       CASE WHEN (t.cold_p50 / nullif(t.reuse_p50, 0)) IS NULL THEN '-' ELSE printf('%.2fx', t.cold_p50 / nullif(t.reuse_p50, 0)) END AS "speedup p50",
       CASE WHEN (per.cs) IS NULL THEN '-' ELSE printf('%.2f', per.cs) END AS "TTFT sum cold (s)",
       CASE WHEN (per.rs) IS NULL THEN '-' ELSE printf('%.2f', per.rs) END AS "TTFT sum reused (s)",
       CASE WHEN (per.ident) IS NULL THEN '-' ELSE printf('%.1f', per.ident) END AS "bit-identical (%)",
       CASE WHEN (per.forked) IS NULL THEN '-' ELSE printf('%.1f', per.forked) END AS "forked (%)"
FROM per LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 0
ORDER BY per.vo, per.sv, per.run_id;
