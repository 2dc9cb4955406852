-- tab-probe-all: one row per live server probed (latest run per variant): its
-- engine and API, the requests, how many came back whole and were compared,
-- how many of those were bit-identical warm against cold (top-K
-- log-probabilities as float bits and JSON text at every generated position,
-- no fork), the reuse checks (reported equal to, less or more than expected;
-- not checked: the server reported none or the prompt's tokens were not known
-- exactly), the requests the server failed, and the median TTFT cold and warm.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(label) AS label, count(*) AS n,
                    sum(error IS NULL AND verified = 1) AS cmp,
                    sum(error IS NULL AND verified = 1 AND logits_equal = 1 AND decode_equal = 1 AND fork_step IS NULL
                        AND coalesce(json_equal, 1) = 1) AS ident,
                    coalesce(sum(error IS NULL AND reuse_reported = reuse_expected), 0) AS eq,
                    coalesce(sum(error IS NULL AND reuse_reported < reuse_expected), 0) AS less,
                    coalesce(sum(error IS NULL AND reuse_reported > reuse_expected), 0) AS more,
                    sum(error IS NULL AND (reuse_reported IS NULL OR reuse_expected IS NULL)) AS unchecked,
                    sum(error IS NOT NULL) AS failed
             FROM req GROUP BY run_id)
SELECT per.label AS "variant", coalesce(f.server_engine, '?') || ' / ' || coalesce(f.server_api, '?') AS "engine / API",
       per.n AS "requests", per.cmp AS "compared",
       printf('%d (%.0f%%)', per.ident, 100.0 * per.ident / nullif(per.cmp, 0)) AS "bit-identical",
       per.eq AS "reuse = expected", per.less AS "less", per.more AS "more", per.unchecked AS "not checked",
       per.failed AS "failed", printf('%.1f', t.cold_p50) AS "TTFT p50 cold ms", printf('%.1f', t.reuse_p50) AS "TTFT p50 warm ms"
FROM per JOIN fig_runs f USING (run_id) LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 0
ORDER BY per.vo;
