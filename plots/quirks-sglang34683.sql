-- quirks-sglang34683: the sglang34683/* runs, one row each (series = the
-- variant): 1 variant index, 2 variant, 3 % of requests bit-identical to
-- cold, 4 the largest ULP distance of a logit (1 when none, for the log axis).
-- runs: variant LIKE 'sglang34683/%'
SELECT label, dense_rank() OVER (ORDER BY min(vorder)) - 1, substr(label, 13),
       printf('%.2f', 100.0 * avg(logits_equal = 1 AND decode_equal = 1 AND coalesce(state_equal, 1) = 1)),
       max(1, max(coalesce(max_ulp, 0)))
FROM req GROUP BY run_id ORDER BY min(vorder);
