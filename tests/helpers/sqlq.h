/*
 * tests/helpers/sqlq.h: one-value SQL queries for tests that read a
 * results database. Failures are cmocka failures naming the query.
 */
#ifndef KVR_TESTS_SQLQ_H
#define KVR_TESTS_SQLQ_H

#include <stdint.h>

/* The single integer the last statement of sql returns. Leading statements
 * (for example ATTACH) run first. */
int64_t q_int(const char *db, const char *sql);

#endif
