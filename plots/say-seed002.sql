-- say-seed002: one sentence for REPORT.md with the numbers of seed002, per
-- variant: turns, cumulative TTFT reused and cold (s), tokens prefilled.
WITH
per AS (SELECT run_id, min(vorder) AS vo, coalesce(min(variant), 'run ' || run_id) AS v, count(*) AS n,
               sum(ttft_reuse_ms) / 1000.0 AS rs, sum(ttft_cold_ms) / 1000.0 AS cs,
               sum(n_prefilled) AS pf, sum(n_prompt) AS np
        FROM req GROUP BY run_id),
s AS (SELECT vo, printf('%s: %d turns, cumulative TTFT %.2f s reused against %.2f s cold, %d of %d prompt tokens prefilled',
                        v, n, rs, cs, pf, np) AS t
      FROM per)
SELECT 'In this database: ' || group_concat(t, '. ') || '.' FROM (SELECT t FROM s ORDER BY vo)
HAVING count(*) > 0;
