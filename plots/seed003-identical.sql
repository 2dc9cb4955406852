-- runs: coalesce(variant, '') NOT LIKE 'sweep/%'
-- seed003-identical: per variant "MODEL/REST": MODEL (panel), REST (bar
-- label), % of requests bit-identical (logits_equal AND decode_equal AND state_equal not 0), % of
-- greedy generations (requests with n_decode > 0) that fork, requests.
SELECT CASE WHEN instr(variant, '/') > 0 THEN substr(variant, 1, instr(variant, '/') - 1)
            ELSE 'all variants' END,
       CASE WHEN instr(variant, '/') > 0 THEN substr(variant, instr(variant, '/') + 1)
            ELSE coalesce(variant, 'run ' || run_id) END,
       printf('%.3f', 100.0 * avg(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1)),
       printf('%.3f', coalesce(100.0 * sum(fork_step IS NOT NULL) / nullif(sum(n_decode > 0), 0), 0)),
       count(*)
FROM req GROUP BY run_id ORDER BY min(run_id);
