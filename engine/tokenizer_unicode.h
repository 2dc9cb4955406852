/*
 * engine/tokenizer_unicode.h: Unicode classes for the tokenizer's
 * pre-tokenizers (internal to engine/tokenizer*.c), and their lookup.
 *
 * One class per code point, exactly one of letter, number, whitespace, mark,
 * punctuation, symbol, separator, control/format/private-use, unassigned:
 * llama.cpp's unicode_cpt_flags reduced to what its splitters test (\p{L},
 * \p{N}, \s, \p{M}, \p{P}, \p{S}), Unicode 15.1.
 */
#ifndef ENG_TOKENIZER_UNICODE_H
#define ENG_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* UC_NONE (0) is never a code point's class: splitters use it for "past the end". */
enum { UC_NONE = 0, UC_L = 1, UC_N = 2, UC_W = 3, UC_M = 4, UC_P = 5, UC_S = 6, UC_Z = 7, UC_C = 8, UC_U = 9 };

typedef struct { uint32_t start; uint8_t cls; } eng_uni_range;

extern const eng_uni_range eng_uni_ranges[];   /* sorted by start; the first starts at 0 */
extern const size_t        eng_uni_n_ranges;

/* The class of every BMP code point, filled by eng_uni_init. */
extern uint8_t eng_uni_bmp[0x10000];
/* Fills eng_uni_bmp once (thread-safe; every tokenizer load calls it). */
void    eng_uni_init(void);
/* The class of a code point <= 0x10FFFF (after eng_uni_init). */
uint8_t eng_uni_class(uint32_t c);

#endif /* ENG_TOKENIZER_UNICODE_H */
