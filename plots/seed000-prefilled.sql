-- seed000-prefilled: per fresh session, its first request (the one that
-- starts from the disk cache): series (variant label), session number
-- (1, 2, ... in replay order), tokens prefilled in the reused run, prompt tokens.
SELECT label, session_no, n_prefilled, n_prompt
FROM req WHERE req_index = first_idx ORDER BY vorder, run_id, session_no;
