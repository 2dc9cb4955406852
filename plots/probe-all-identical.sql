-- probe-*-identical: per variant (latest run each), two series: "bit-identical"
-- (% of the compared requests whose warm run gave the same top-K
-- log-probabilities as the cold run at every generated position, as float
-- bits and as JSON text, and did not fork) and "reuse as expected" (% of the
-- requests whose reported reuse could be checked that equal the expected);
-- columns: 1 variant index, 2 variant, 3 percent, 4 its count "k/n".
WITH per AS (SELECT run_id, min(vorder) AS vo, min(label) AS label,
                    sum(verified = 1 AND error IS NULL) AS n_cmp,
                    sum(verified = 1 AND error IS NULL AND logits_equal = 1 AND decode_equal = 1
                        AND fork_step IS NULL AND coalesce(json_equal, 1) = 1) AS n_id,
                    sum(error IS NULL AND reuse_reported IS NOT NULL AND reuse_expected IS NOT NULL) AS n_chk,
                    coalesce(sum(error IS NULL AND reuse_reported = reuse_expected), 0) AS n_ok
             FROM req GROUP BY run_id),
g AS (SELECT *, row_number() OVER (ORDER BY vo) - 1 AS gi FROM per),
k(kind, o) AS (VALUES ('bit-identical', 0), ('reuse as expected', 1))
SELECT k.kind, g.gi, g.label,
       CASE WHEN (k.o = 0 AND g.n_cmp = 0) OR (k.o = 1 AND g.n_chk = 0) THEN ''
            WHEN k.o = 0 THEN printf('%.1f', 100.0 * g.n_id / g.n_cmp) ELSE printf('%.1f', 100.0 * g.n_ok / g.n_chk) END,
       CASE k.o WHEN 0 THEN g.n_id || '/' || g.n_cmp ELSE g.n_ok || '/' || g.n_chk END
FROM g CROSS JOIN k
ORDER BY k.o, g.gi;
