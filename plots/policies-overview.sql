-- policies-overview: the --align chunk runs. Series: the policy (cold,
-- slot-lcp, disk-anchor, block-hash, radix); one row per workload
-- (transcript/model, in run order): 1 workload index, 2 workload,
-- 3 reuse fraction sum(n_reused)/sum(n_prompt), 4 TTFT speedup p50 (cold p50
-- / reused p50), 5 most bytes the cache held after a request (MiB),
-- 6 tokens prefilled by the reused run (x1000).
-- runs: align = 'chunk'
WITH per AS (SELECT run_id, min(vorder) AS vo, min(policy) AS policy,
                    substr(min(variant), 1, instr(min(variant), '/' || min(align) || '/') - 1) AS work,
                    1.0 * sum(n_reused) / sum(n_prompt) AS reuse, sum(n_prefilled) AS pf,
                    max(cache_bytes) / 1048576.0 AS mib
             FROM req GROUP BY run_id),
g AS (SELECT work, dense_rank() OVER (ORDER BY min(vo)) - 1 AS gi FROM per GROUP BY work)
SELECT per.policy, g.gi, g.work, printf('%.4f', per.reuse),
       printf('%.3f', t.cold_p50 / nullif(t.reuse_p50, 0)), printf('%.4f', coalesce(per.mib, 0)),
       printf('%.3f', per.pf / 1000.0)
FROM per JOIN g USING (work) LEFT JOIN ttft_p50 t ON t.run_id = per.run_id AND t.followup = 0
ORDER BY CASE per.policy WHEN 'cold' THEN 0 WHEN 'slot-lcp' THEN 1 WHEN 'disk-anchor' THEN 2
                         WHEN 'block-hash' THEN 3 ELSE 4 END, g.gi;
