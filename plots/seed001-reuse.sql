-- seed001-reuse: per request: series (variant label), request number
-- (req_index + 1), reuse fraction n_reused / n_prompt.
SELECT label, req_index + 1, printf('%.5f', 1.0 * n_reused / n_prompt)
FROM req WHERE n_prompt > 0 ORDER BY vorder, run_id, req_index;
