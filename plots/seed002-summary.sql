-- seed002-summary: per variant: label, TTFT p50 cold (ms), TTFT p50 reused
-- (ms), total prompt tokens, total prefilled tokens (reused run), requests.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(variant) AS variant, sum(n_prompt) AS np,
               sum(n_prefilled) AS npf, count(*) AS n
        FROM req GROUP BY run_id)
SELECT coalesce(per.variant, 'run ' || per.run_id), round(t.cold_p50, 4),
       round(t.reuse_p50, 4), per.np, per.npf, per.n
FROM per LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 0
ORDER BY per.vo, per.run_id;
