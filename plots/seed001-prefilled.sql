-- seed001-prefilled: per request: series (variant label), request number
-- (req_index + 1), tokens prefilled in the reused run, prompt tokens.
SELECT label, req_index + 1, n_prefilled, n_prompt
FROM req ORDER BY vorder, run_id, req_index;
