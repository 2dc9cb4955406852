-- seed000-anchor: per fresh session: series (variant label), session number
-- (req_index + 1), ms spent writing the disk anchor (0 when none was
-- written), anchor position (tokens; empty when none).
SELECT label, req_index + 1, printf('%.4f', anchor_write), anchor_at
FROM req ORDER BY vorder, run_id, req_index;
