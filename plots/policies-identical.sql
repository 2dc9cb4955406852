-- policies-identical: every run. Series: the policy; one row per workload and
-- alignment: 1 workload index, 2 workload, 3 alignment (0 chunk, 1 none),
-- 4 % of requests bit-identical to cold (logits, every decode step and the
-- state left: memcmp), 5 reuse fraction.
WITH per AS (SELECT run_id, min(vorder) AS vo, min(policy) AS policy, min(align) AS al,
                    substr(min(variant), 1, instr(min(variant), '/' || min(align) || '/') - 1) AS work,
                    100.0 * avg(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1) AS ident,
                    1.0 * sum(n_reused) / sum(n_prompt) AS reuse
             FROM req GROUP BY run_id),
g AS (SELECT work, dense_rank() OVER (ORDER BY min(vo)) - 1 AS gi FROM per GROUP BY work)
SELECT per.policy, g.gi, g.work, CASE per.al WHEN 'chunk' THEN 0 ELSE 1 END, printf('%.2f', per.ident),
       printf('%.4f', per.reuse)
FROM per JOIN g USING (work)
ORDER BY CASE per.policy WHEN 'cold' THEN 0 WHEN 'slot-lcp' THEN 1 WHEN 'disk-anchor' THEN 2
                         WHEN 'block-hash' THEN 3 ELSE 4 END, per.al, g.gi;
