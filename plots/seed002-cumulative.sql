-- seed002-cumulative: per request in replay order: series, turn (req_index
-- + 1), cumulative TTFT (s) up to and including it. Series: each variant's
-- reused path (sum of ttft_reuse_ms), then per model family (the variant's
-- part before '/') the cold path (sum of the family's mean ttft_cold_ms per
-- request), as "FAMILY cold".
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
SELECT series, req_index + 1, printf('%.6f', s) FROM (SELECT * FROM reused UNION ALL SELECT * FROM cold)
ORDER BY part, o, series, req_index;
