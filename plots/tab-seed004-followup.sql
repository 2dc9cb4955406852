-- tab-seed004-followup: per run (variant, context length), over the
-- follow-up requests (turn > 0): their number, reuse fraction, TTFT p50
-- cold and reused (ms) and the speedup of the medians.
WITH
cold AS (SELECT run_id, ttft_cold_ms AS x,
                row_number() OVER (PARTITION BY run_id ORDER BY ttft_cold_ms) AS k,
                count(*) OVER (PARTITION BY run_id) AS n
         FROM req WHERE turn > 0 AND ttft_cold_ms IS NOT NULL),
reuse AS (SELECT run_id, ttft_reuse_ms AS x,
                 row_number() OVER (PARTITION BY run_id ORDER BY ttft_reuse_ms) AS k,
                 count(*) OVER (PARTITION BY run_id) AS n
          FROM req WHERE turn > 0 AND ttft_reuse_ms IS NOT NULL),
c50 AS (SELECT run_id, avg(x) AS p50 FROM cold WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
r50 AS (SELECT run_id, avg(x) AS p50 FROM reuse WHERE k IN ((n + 1) / 2, (n + 2) / 2) GROUP BY run_id),
per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS variant, min(sweep_value) AS ctx,
               count(*) AS n, sum(n_prompt) AS np, sum(n_reused) AS nr
        FROM req WHERE turn > 0 GROUP BY run_id)
SELECT coalesce(per.variant, 'run ' || per.run_id) AS "variant",
       CASE WHEN (per.ctx) IS NULL THEN '-' ELSE printf('%g', per.ctx) END AS "context (tokens)",
       per.n AS "follow-ups",
       printf('%.3f', 1.0 * per.nr / nullif(per.np, 0)) AS "reuse fraction",
       CASE WHEN (c50.p50) IS NULL THEN '-' ELSE printf('%.2f', c50.p50) END AS "TTFT p50 cold (ms)",
       CASE WHEN (r50.p50) IS NULL THEN '-' ELSE printf('%.2f', r50.p50) END AS "TTFT p50 reused (ms)",
       CASE WHEN (c50.p50 / nullif(r50.p50, 0)) IS NULL THEN '-' ELSE printf('%.2fx', c50.p50 / nullif(r50.p50, 0)) END AS "speedup p50"
FROM per LEFT JOIN c50 USING (run_id) LEFT JOIN r50 USING (run_id)
ORDER BY per.vo, per.ctx;
