-- say-policies: one paragraph for REPORT.md: per alignment, the reuse fraction
-- of each policy over every workload (summed tokens), and the share of
-- bit-identical requests among the policies that reuse (all but cold).
WITH per AS (SELECT align AS al, policy, sum(n_reused) AS nr, sum(n_prompt) AS np,
                    sum(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1) AS ok,
                    count(*) AS n
             FROM req GROUP BY align, policy),
s AS (SELECT al, group_concat(policy || ' ' || printf('%.3f', 1.0 * nr / np), ', ') AS t
      FROM (SELECT * FROM per ORDER BY CASE policy WHEN 'cold' THEN 0 WHEN 'slot-lcp' THEN 1
                                                  WHEN 'disk-anchor' THEN 2 WHEN 'block-hash' THEN 3 ELSE 4 END)
      GROUP BY al),
b AS (SELECT al, 100.0 * sum(ok) / sum(n) AS pct FROM per WHERE policy != 'cold' GROUP BY al)
SELECT group_concat(printf('With --align %s the reuse fractions over all workloads are %s; %.1f%% of the requests of the reusing policies are bit-identical to cold.',
                           s.al, s.t, b.pct), ' ')
FROM (SELECT * FROM s ORDER BY al) s JOIN b USING (al)
HAVING count(*) > 0;
