-- tab-seed004-followup: per run (variant, context length), over the
-- follow-up requests (turn > 0): their number, reuse fraction, TTFT p50
-- cold and reused (ms) and the speedup of the medians.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS variant, min(sweep_value) AS ctx,
               count(*) AS n, sum(n_prompt) AS np, sum(n_reused) AS nr
        FROM req WHERE turn > 0 GROUP BY run_id)
SELECT coalesce(per.variant, 'run ' || per.run_id) AS "variant",
       CASE WHEN (per.ctx) IS NULL THEN '-' ELSE printf('%g', per.ctx) END AS "context (tokens)",
       per.n AS "follow-ups",
       printf('%.3f', 1.0 * per.nr / nullif(per.np, 0)) AS "reuse fraction",
       CASE WHEN (t.cold_p50) IS NULL THEN '-' ELSE printf('%.2f', t.cold_p50) END AS "TTFT p50 cold (ms)",
       CASE WHEN (t.reuse_p50) IS NULL THEN '-' ELSE printf('%.2f', t.reuse_p50) END AS "TTFT p50 reused (ms)",
       CASE WHEN (t.cold_p50 / nullif(t.reuse_p50, 0)) IS NULL THEN '-' ELSE printf('%.2fx', t.cold_p50 / nullif(t.reuse_p50, 0)) END AS "speedup p50"
FROM per LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 1
ORDER BY per.vo, per.ctx;
