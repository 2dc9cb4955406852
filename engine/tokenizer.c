/*
 * engine/tokenizer.c: SentencePiece-BPE ("llama") and GPT-2 byte-level BPE
 * ("gpt2") tokenizers loaded from GGUF tokenizer.ggml.* metadata, with
 * llama.cpp's semantics (src/llama-vocab.cpp, src/unicode.cpp), so that
 * prompts get the token ids a llama.cpp server would give them.
 *
 * Both models are run over "symbols": every vocabulary token (ids
 * 0..n_vocab-1) plus "pseudo" symbols (ids n_vocab..n_sym-1) for texts that
 * can occur during merging but are not tokens (a character that appears
 * inside tokens but not alone, a merge part or result missing from the
 * vocabulary). Symbol texts are unique (a duplicated token text maps to its
 * last id, as llama.cpp's token_to_id map does), so comparing symbol ids is
 * comparing texts, and a merge is one integer-keyed hash lookup:
 *   pairs[(left, right)] = (merged symbol, rank)
 * SPM: left+right is a token (its score orders the merges); a pair stored
 * with merged == -1 only says that the two characters occur side by side
 * inside some token. A text boundary between two characters that never sit
 * side by side in a token can never be crossed by a merge, so the text is
 * cut there into independent segments and merged segment by segment: the
 * result is the same as llama.cpp's one priority queue over the whole text,
 * and each queue stays small (O(n log n) overall, even on 1 MB without spaces).
 * GPT-2: merges come from tokenizer.ggml.merges, ranked by their order
 * (first occurrence wins); words come from the pre-tokenizer, written by
 * hand over Unicode classes (tables below: letters \p{L}, numbers \p{N},
 * from Python's unicodedata 14.0, the way llama.cpp generates its own).
 *
 * Invalid UTF-8 is tokenized as llama.cpp does: SPM groups bytes by their
 * lead byte and falls back to <0xNN> tokens (exact bytes kept); GPT-2
 * decodes leniently, turning each invalid byte into U+FFFD (and overlong
 * forms into their code point) before the byte-level encoding.
 *
 * Special tokens follow llama.cpp's tokenizer_st_partition: CONTROL and
 * UNKNOWN texts are matched only with parse_special, USER_DEFINED ones
 * always; SPM puts the dummy-prefix space again after every special token.
 * Decoding is the exact inverse of tokenizing (no clean_spaces pass), except
 * where the input is not kept: SPM reads U+2581 as a space, GPT-2 replaces
 * invalid UTF-8. eng_tokenize returns INT32_MIN (TOK_FAIL) when memory runs
 * out or len exceeds INT32_MAX / 4.
 *
 * A tokenizer is immutable after load; every call allocates its own scratch,
 * so one tokenizer can serve many threads at once.
 */
#define XXH_INLINE_ALL
#include "tokenizer.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "status.h"

/* GGUF token_type values (llama.cpp's llama_token_type). */
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3,
       TT_USER_DEFINED = 4, TT_UNUSED = 5, TT_BYTE = 6 };

/* BPE pre-tokenizers (tokenizer.ggml.pre). */
enum { PRE_GPT2 = 0, PRE_LLAMA3 = 1, PRE_QWEN2 = 2 };

/* Returned by eng_tokenize when scratch memory cannot be had or len is absurd. */
#define TOK_FAIL INT32_MIN

// ----------------------------------------------------------------------------
// Unicode classes: exactly one of letter, number, whitespace, other per code
// point (llama.cpp's unicode_cpt_flags reduced to what the splitters test).

enum { CF_L = 1, CF_N = 2, CF_WS = 4, CF_O = 8 };

typedef struct { uint32_t lo, hi; uint8_t cls; } uni_range;

#define L(a, b) {0x##a, 0x##b, CF_L}
#define N(a, b) {0x##a, 0x##b, CF_N}
/* General categories L* and N*, Unicode 14.0, sorted, generated with Python's unicodedata. */
static const uni_range uni_ranges[] = {
    N(30,39), L(41,5A), L(61,7A), L(AA,AA), N(B2,B3), L(B5,B5), N(B9,B9), L(BA,BA), N(BC,BE),
    L(C0,D6), L(D8,F6), L(F8,2C1), L(2C6,2D1), L(2E0,2E4), L(2EC,2EC), L(2EE,2EE), L(370,374),
    L(376,377), L(37A,37D), L(37F,37F), L(386,386), L(388,38A), L(38C,38C), L(38E,3A1), L(3A3,3F5),
    L(3F7,481), L(48A,52F), L(531,556), L(559,559), L(560,588), L(5D0,5EA), L(5EF,5F2), L(620,64A),
    N(660,669), L(66E,66F), L(671,6D3), L(6D5,6D5), L(6E5,6E6), L(6EE,6EF), N(6F0,6F9), L(6FA,6FC),
    L(6FF,6FF), L(710,710), L(712,72F), L(74D,7A5), L(7B1,7B1), N(7C0,7C9), L(7CA,7EA), L(7F4,7F5),
    L(7FA,7FA), L(800,815), L(81A,81A), L(824,824), L(828,828), L(840,858), L(860,86A), L(870,887),
    L(889,88E), L(8A0,8C9), L(904,939), L(93D,93D), L(950,950), L(958,961), N(966,96F), L(971,980),
    L(985,98C), L(98F,990), L(993,9A8), L(9AA,9B0), L(9B2,9B2), L(9B6,9B9), L(9BD,9BD), L(9CE,9CE),
    L(9DC,9DD), L(9DF,9E1), N(9E6,9EF), L(9F0,9F1), N(9F4,9F9), L(9FC,9FC), L(A05,A0A), L(A0F,A10),
    L(A13,A28), L(A2A,A30), L(A32,A33), L(A35,A36), L(A38,A39), L(A59,A5C), L(A5E,A5E), N(A66,A6F),
    L(A72,A74), L(A85,A8D), L(A8F,A91), L(A93,AA8), L(AAA,AB0), L(AB2,AB3), L(AB5,AB9), L(ABD,ABD),
    L(AD0,AD0), L(AE0,AE1), N(AE6,AEF), L(AF9,AF9), L(B05,B0C), L(B0F,B10), L(B13,B28), L(B2A,B30),
    L(B32,B33), L(B35,B39), L(B3D,B3D), L(B5C,B5D), L(B5F,B61), N(B66,B6F), L(B71,B71), N(B72,B77),
    L(B83,B83), L(B85,B8A), L(B8E,B90), L(B92,B95), L(B99,B9A), L(B9C,B9C), L(B9E,B9F), L(BA3,BA4),
    L(BA8,BAA), L(BAE,BB9), L(BD0,BD0), N(BE6,BF2), L(C05,C0C), L(C0E,C10), L(C12,C28), L(C2A,C39),
    L(C3D,C3D), L(C58,C5A), L(C5D,C5D), L(C60,C61), N(C66,C6F), N(C78,C7E), L(C80,C80), L(C85,C8C),
    L(C8E,C90), L(C92,CA8), L(CAA,CB3), L(CB5,CB9), L(CBD,CBD), L(CDD,CDE), L(CE0,CE1), N(CE6,CEF),
    L(CF1,CF2), L(D04,D0C), L(D0E,D10), L(D12,D3A), L(D3D,D3D), L(D4E,D4E), L(D54,D56), N(D58,D5E),
    L(D5F,D61), N(D66,D78), L(D7A,D7F), L(D85,D96), L(D9A,DB1), L(DB3,DBB), L(DBD,DBD), L(DC0,DC6),
    N(DE6,DEF), L(E01,E30), L(E32,E33), L(E40,E46), N(E50,E59), L(E81,E82), L(E84,E84), L(E86,E8A),
    L(E8C,EA3), L(EA5,EA5), L(EA7,EB0), L(EB2,EB3), L(EBD,EBD), L(EC0,EC4), L(EC6,EC6), N(ED0,ED9),
    L(EDC,EDF), L(F00,F00), N(F20,F33), L(F40,F47), L(F49,F6C), L(F88,F8C), L(1000,102A),
    L(103F,103F), N(1040,1049), L(1050,1055), L(105A,105D), L(1061,1061), L(1065,1066),
    L(106E,1070), L(1075,1081), L(108E,108E), N(1090,1099), L(10A0,10C5), L(10C7,10C7),
    L(10CD,10CD), L(10D0,10FA), L(10FC,1248), L(124A,124D), L(1250,1256), L(1258,1258),
    L(125A,125D), L(1260,1288), L(128A,128D), L(1290,12B0), L(12B2,12B5), L(12B8,12BE),
    L(12C0,12C0), L(12C2,12C5), L(12C8,12D6), L(12D8,1310), L(1312,1315), L(1318,135A),
    N(1369,137C), L(1380,138F), L(13A0,13F5), L(13F8,13FD), L(1401,166C), L(166F,167F),
    L(1681,169A), L(16A0,16EA), N(16EE,16F0), L(16F1,16F8), L(1700,1711), L(171F,1731),
    L(1740,1751), L(1760,176C), L(176E,1770), L(1780,17B3), L(17D7,17D7), L(17DC,17DC),
    N(17E0,17E9), N(17F0,17F9), N(1810,1819), L(1820,1878), L(1880,1884), L(1887,18A8),
    L(18AA,18AA), L(18B0,18F5), L(1900,191E), N(1946,194F), L(1950,196D), L(1970,1974),
    L(1980,19AB), L(19B0,19C9), N(19D0,19DA), L(1A00,1A16), L(1A20,1A54), N(1A80,1A89),
    N(1A90,1A99), L(1AA7,1AA7), L(1B05,1B33), L(1B45,1B4C), N(1B50,1B59), L(1B83,1BA0),
    L(1BAE,1BAF), N(1BB0,1BB9), L(1BBA,1BE5), L(1C00,1C23), N(1C40,1C49), L(1C4D,1C4F),
    N(1C50,1C59), L(1C5A,1C7D), L(1C80,1C88), L(1C90,1CBA), L(1CBD,1CBF), L(1CE9,1CEC),
    L(1CEE,1CF3), L(1CF5,1CF6), L(1CFA,1CFA), L(1D00,1DBF), L(1E00,1F15), L(1F18,1F1D),
    L(1F20,1F45), L(1F48,1F4D), L(1F50,1F57), L(1F59,1F59), L(1F5B,1F5B), L(1F5D,1F5D),
    L(1F5F,1F7D), L(1F80,1FB4), L(1FB6,1FBC), L(1FBE,1FBE), L(1FC2,1FC4), L(1FC6,1FCC),
    L(1FD0,1FD3), L(1FD6,1FDB), L(1FE0,1FEC), L(1FF2,1FF4), L(1FF6,1FFC), N(2070,2070),
    L(2071,2071), N(2074,2079), L(207F,207F), N(2080,2089), L(2090,209C), L(2102,2102),
    L(2107,2107), L(210A,2113), L(2115,2115), L(2119,211D), L(2124,2124), L(2126,2126),
    L(2128,2128), L(212A,212D), L(212F,2139), L(213C,213F), L(2145,2149), L(214E,214E),
    N(2150,2182), L(2183,2184), N(2185,2189), N(2460,249B), N(24EA,24FF), N(2776,2793),
    L(2C00,2CE4), L(2CEB,2CEE), L(2CF2,2CF3), N(2CFD,2CFD), L(2D00,2D25), L(2D27,2D27),
    L(2D2D,2D2D), L(2D30,2D67), L(2D6F,2D6F), L(2D80,2D96), L(2DA0,2DA6), L(2DA8,2DAE),
    L(2DB0,2DB6), L(2DB8,2DBE), L(2DC0,2DC6), L(2DC8,2DCE), L(2DD0,2DD6), L(2DD8,2DDE),
    L(2E2F,2E2F), L(3005,3006), N(3007,3007), N(3021,3029), L(3031,3035), N(3038,303A),
    L(303B,303C), L(3041,3096), L(309D,309F), L(30A1,30FA), L(30FC,30FF), L(3105,312F),
    L(3131,318E), N(3192,3195), L(31A0,31BF), L(31F0,31FF), N(3220,3229), N(3248,324F),
    N(3251,325F), N(3280,3289), N(32B1,32BF), L(3400,4DBF), L(4E00,A48C), L(A4D0,A4FD),
    L(A500,A60C), L(A610,A61F), N(A620,A629), L(A62A,A62B), L(A640,A66E), L(A67F,A69D),
    L(A6A0,A6E5), N(A6E6,A6EF), L(A717,A71F), L(A722,A788), L(A78B,A7CA), L(A7D0,A7D1),
    L(A7D3,A7D3), L(A7D5,A7D9), L(A7F2,A801), L(A803,A805), L(A807,A80A), L(A80C,A822),
    N(A830,A835), L(A840,A873), L(A882,A8B3), N(A8D0,A8D9), L(A8F2,A8F7), L(A8FB,A8FB),
    L(A8FD,A8FE), N(A900,A909), L(A90A,A925), L(A930,A946), L(A960,A97C), L(A984,A9B2),
    L(A9CF,A9CF), N(A9D0,A9D9), L(A9E0,A9E4), L(A9E6,A9EF), N(A9F0,A9F9), L(A9FA,A9FE),
    L(AA00,AA28), L(AA40,AA42), L(AA44,AA4B), N(AA50,AA59), L(AA60,AA76), L(AA7A,AA7A),
    L(AA7E,AAAF), L(AAB1,AAB1), L(AAB5,AAB6), L(AAB9,AABD), L(AAC0,AAC0), L(AAC2,AAC2),
    L(AADB,AADD), L(AAE0,AAEA), L(AAF2,AAF4), L(AB01,AB06), L(AB09,AB0E), L(AB11,AB16),
    L(AB20,AB26), L(AB28,AB2E), L(AB30,AB5A), L(AB5C,AB69), L(AB70,ABE2), N(ABF0,ABF9),
    L(AC00,D7A3), L(D7B0,D7C6), L(D7CB,D7FB), L(F900,FA6D), L(FA70,FAD9), L(FB00,FB06),
    L(FB13,FB17), L(FB1D,FB1D), L(FB1F,FB28), L(FB2A,FB36), L(FB38,FB3C), L(FB3E,FB3E),
    L(FB40,FB41), L(FB43,FB44), L(FB46,FBB1), L(FBD3,FD3D), L(FD50,FD8F), L(FD92,FDC7),
    L(FDF0,FDFB), L(FE70,FE74), L(FE76,FEFC), N(FF10,FF19), L(FF21,FF3A), L(FF41,FF5A),
    L(FF66,FFBE), L(FFC2,FFC7), L(FFCA,FFCF), L(FFD2,FFD7), L(FFDA,FFDC), L(10000,1000B),
    L(1000D,10026), L(10028,1003A), L(1003C,1003D), L(1003F,1004D), L(10050,1005D), L(10080,100FA),
    N(10107,10133), N(10140,10178), N(1018A,1018B), L(10280,1029C), L(102A0,102D0), N(102E1,102FB),
    L(10300,1031F), N(10320,10323), L(1032D,10340), N(10341,10341), L(10342,10349), N(1034A,1034A),
    L(10350,10375), L(10380,1039D), L(103A0,103C3), L(103C8,103CF), N(103D1,103D5), L(10400,1049D),
    N(104A0,104A9), L(104B0,104D3), L(104D8,104FB), L(10500,10527), L(10530,10563), L(10570,1057A),
    L(1057C,1058A), L(1058C,10592), L(10594,10595), L(10597,105A1), L(105A3,105B1), L(105B3,105B9),
    L(105BB,105BC), L(10600,10736), L(10740,10755), L(10760,10767), L(10780,10785), L(10787,107B0),
    L(107B2,107BA), L(10800,10805), L(10808,10808), L(1080A,10835), L(10837,10838), L(1083C,1083C),
    L(1083F,10855), N(10858,1085F), L(10860,10876), N(10879,1087F), L(10880,1089E), N(108A7,108AF),
    L(108E0,108F2), L(108F4,108F5), N(108FB,108FF), L(10900,10915), N(10916,1091B), L(10920,10939),
    L(10980,109B7), N(109BC,109BD), L(109BE,109BF), N(109C0,109CF), N(109D2,109FF), L(10A00,10A00),
    L(10A10,10A13), L(10A15,10A17), L(10A19,10A35), N(10A40,10A48), L(10A60,10A7C), N(10A7D,10A7E),
    L(10A80,10A9C), N(10A9D,10A9F), L(10AC0,10AC7), L(10AC9,10AE4), N(10AEB,10AEF), L(10B00,10B35),
    L(10B40,10B55), N(10B58,10B5F), L(10B60,10B72), N(10B78,10B7F), L(10B80,10B91), N(10BA9,10BAF),
    L(10C00,10C48), L(10C80,10CB2), L(10CC0,10CF2), N(10CFA,10CFF), L(10D00,10D23), N(10D30,10D39),
    N(10E60,10E7E), L(10E80,10EA9), L(10EB0,10EB1), L(10F00,10F1C), N(10F1D,10F26), L(10F27,10F27),
    L(10F30,10F45), N(10F51,10F54), L(10F70,10F81), L(10FB0,10FC4), N(10FC5,10FCB), L(10FE0,10FF6),
    L(11003,11037), N(11052,1106F), L(11071,11072), L(11075,11075), L(11083,110AF), L(110D0,110E8),
    N(110F0,110F9), L(11103,11126), N(11136,1113F), L(11144,11144), L(11147,11147), L(11150,11172),
    L(11176,11176), L(11183,111B2), L(111C1,111C4), N(111D0,111D9), L(111DA,111DA), L(111DC,111DC),
    N(111E1,111F4), L(11200,11211), L(11213,1122B), L(11280,11286), L(11288,11288), L(1128A,1128D),
    L(1128F,1129D), L(1129F,112A8), L(112B0,112DE), N(112F0,112F9), L(11305,1130C), L(1130F,11310),
    L(11313,11328), L(1132A,11330), L(11332,11333), L(11335,11339), L(1133D,1133D), L(11350,11350),
    L(1135D,11361), L(11400,11434), L(11447,1144A), N(11450,11459), L(1145F,11461), L(11480,114AF),
    L(114C4,114C5), L(114C7,114C7), N(114D0,114D9), L(11580,115AE), L(115D8,115DB), L(11600,1162F),
    L(11644,11644), N(11650,11659), L(11680,116AA), L(116B8,116B8), N(116C0,116C9), L(11700,1171A),
    N(11730,1173B), L(11740,11746), L(11800,1182B), L(118A0,118DF), N(118E0,118F2), L(118FF,11906),
    L(11909,11909), L(1190C,11913), L(11915,11916), L(11918,1192F), L(1193F,1193F), L(11941,11941),
    N(11950,11959), L(119A0,119A7), L(119AA,119D0), L(119E1,119E1), L(119E3,119E3), L(11A00,11A00),
    L(11A0B,11A32), L(11A3A,11A3A), L(11A50,11A50), L(11A5C,11A89), L(11A9D,11A9D), L(11AB0,11AF8),
    L(11C00,11C08), L(11C0A,11C2E), L(11C40,11C40), N(11C50,11C6C), L(11C72,11C8F), L(11D00,11D06),
    L(11D08,11D09), L(11D0B,11D30), L(11D46,11D46), N(11D50,11D59), L(11D60,11D65), L(11D67,11D68),
    L(11D6A,11D89), L(11D98,11D98), N(11DA0,11DA9), L(11EE0,11EF2), L(11FB0,11FB0), N(11FC0,11FD4),
    L(12000,12399), N(12400,1246E), L(12480,12543), L(12F90,12FF0), L(13000,1342E), L(14400,14646),
    L(16800,16A38), L(16A40,16A5E), N(16A60,16A69), L(16A70,16ABE), N(16AC0,16AC9), L(16AD0,16AED),
    L(16B00,16B2F), L(16B40,16B43), N(16B50,16B59), N(16B5B,16B61), L(16B63,16B77), L(16B7D,16B8F),
    L(16E40,16E7F), N(16E80,16E96), L(16F00,16F4A), L(16F50,16F50), L(16F93,16F9F), L(16FE0,16FE1),
    L(16FE3,16FE3), L(17000,187F7), L(18800,18CD5), L(18D00,18D08), L(1AFF0,1AFF3), L(1AFF5,1AFFB),
    L(1AFFD,1AFFE), L(1B000,1B122), L(1B150,1B152), L(1B164,1B167), L(1B170,1B2FB), L(1BC00,1BC6A),
    L(1BC70,1BC7C), L(1BC80,1BC88), L(1BC90,1BC99), N(1D2E0,1D2F3), N(1D360,1D378), L(1D400,1D454),
    L(1D456,1D49C), L(1D49E,1D49F), L(1D4A2,1D4A2), L(1D4A5,1D4A6), L(1D4A9,1D4AC), L(1D4AE,1D4B9),
    L(1D4BB,1D4BB), L(1D4BD,1D4C3), L(1D4C5,1D505), L(1D507,1D50A), L(1D50D,1D514), L(1D516,1D51C),
    L(1D51E,1D539), L(1D53B,1D53E), L(1D540,1D544), L(1D546,1D546), L(1D54A,1D550), L(1D552,1D6A5),
    L(1D6A8,1D6C0), L(1D6C2,1D6DA), L(1D6DC,1D6FA), L(1D6FC,1D714), L(1D716,1D734), L(1D736,1D74E),
    L(1D750,1D76E), L(1D770,1D788), L(1D78A,1D7A8), L(1D7AA,1D7C2), L(1D7C4,1D7CB), N(1D7CE,1D7FF),
    L(1DF00,1DF1E), L(1E100,1E12C), L(1E137,1E13D), N(1E140,1E149), L(1E14E,1E14E), L(1E290,1E2AD),
    L(1E2C0,1E2EB), N(1E2F0,1E2F9), L(1E7E0,1E7E6), L(1E7E8,1E7EB), L(1E7ED,1E7EE), L(1E7F0,1E7FE),
    L(1E800,1E8C4), N(1E8C7,1E8CF), L(1E900,1E943), L(1E94B,1E94B), N(1E950,1E959), N(1EC71,1ECAB),
    N(1ECAD,1ECAF), N(1ECB1,1ECB4), N(1ED01,1ED2D), N(1ED2F,1ED3D), L(1EE00,1EE03), L(1EE05,1EE1F),
    L(1EE21,1EE22), L(1EE24,1EE24), L(1EE27,1EE27), L(1EE29,1EE32), L(1EE34,1EE37), L(1EE39,1EE39),
    L(1EE3B,1EE3B), L(1EE42,1EE42), L(1EE47,1EE47), L(1EE49,1EE49), L(1EE4B,1EE4B), L(1EE4D,1EE4F),
    L(1EE51,1EE52), L(1EE54,1EE54), L(1EE57,1EE57), L(1EE59,1EE59), L(1EE5B,1EE5B), L(1EE5D,1EE5D),
    L(1EE5F,1EE5F), L(1EE61,1EE62), L(1EE64,1EE64), L(1EE67,1EE6A), L(1EE6C,1EE72), L(1EE74,1EE77),
    L(1EE79,1EE7C), L(1EE7E,1EE7E), L(1EE80,1EE89), L(1EE8B,1EE9B), L(1EEA1,1EEA3), L(1EEA5,1EEA9),
    L(1EEAB,1EEBB), N(1F100,1F10C), N(1FBF0,1FBF9), L(20000,2A6DF), L(2A700,2B738), L(2B740,2B81D),
    L(2B820,2CEA1), L(2CEB0,2EBE0), L(2F800,2FA1D), L(30000,3134A),
};
#undef L
#undef N

static uint8_t         bmp_cls[0x10000];   /* class of every BMP code point */
static pthread_once_t  bmp_once = PTHREAD_ONCE_INIT;

static void bmp_build(void) {
    memset(bmp_cls, CF_O, sizeof bmp_cls);
    for (size_t i = 0; i < sizeof uni_ranges / sizeof uni_ranges[0]; i++)
        for (uint32_t c = uni_ranges[i].lo; c <= uni_ranges[i].hi && c < 0x10000; c++)
            bmp_cls[c] = uni_ranges[i].cls;
    /* \s as llama.cpp defines it (PropList White_Space). */
    static const uint16_t ws[] = {0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000};
    for (uint32_t c = 0x09; c <= 0x0D; c++) bmp_cls[c] = CF_WS;
    for (uint32_t c = 0x2000; c <= 0x200A; c++) bmp_cls[c] = CF_WS;
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) bmp_cls[ws[i]] = CF_WS;
}

/* Class of a code point <= 0x10FFFF (bmp_once must have run). */
static uint8_t uni_class(uint32_t c) {
    if (c < 0x10000) return bmp_cls[c];
    size_t lo = 0, hi = sizeof uni_ranges / sizeof uni_ranges[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (uni_ranges[mid].hi < c) lo = mid + 1;
        else hi = mid;
    }
    if (lo < sizeof uni_ranges / sizeof uni_ranges[0] && uni_ranges[lo].lo <= c) return uni_ranges[lo].cls;
    return CF_O;
}

/* Bytes in the UTF-8 sequence a lead byte announces (llama.cpp's unicode_len_utf8;
 * continuation and invalid bytes count 1). */
static inline size_t utf8_lead_len(uint8_t b) {
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[b >> 4];
}

/* Decodes the code point at s[i] (i < n) leniently, as llama.cpp's
 * unicode_cpt_from_utf8: continuation bytes are checked, overlong forms and
 * surrogates are accepted; an invalid sequence, or one above U+10FFFF, gives
 * U+FFFD with length 1. */
static uint32_t utf8_decode(const uint8_t *s, size_t n, size_t i, size_t *len) {
    uint8_t b = s[i];
    *len = 1;
    if (b < 0x80) return b;
    if (!(b & 0x40)) return 0xFFFD;
#define CONT(k) (i + (k) < n && (s[i + (k)] & 0xC0) == 0x80)
    if (!(b & 0x20)) {
        if (!CONT(1)) return 0xFFFD;
        *len = 2;
        return ((uint32_t)(b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    }
    if (!(b & 0x10)) {
        if (!CONT(1) || !CONT(2)) return 0xFFFD;
        *len = 3;
        return ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    }
    if (!(b & 0x08)) {
        if (!CONT(1) || !CONT(2) || !CONT(3)) return 0xFFFD;
        uint32_t c = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                     ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
        if (c > 0x10FFFF) return 0xFFFD;
        *len = 4;
        return c;
    }
#undef CONT
    return 0xFFFD;
}

/* Writes the UTF-8 form of c (<= 0x10FFFF) into out[4]; returns its length. */
static size_t utf8_encode(uint32_t c, uint8_t *out) {
    if (c < 0x80) { out[0] = (uint8_t)c; return 1; }
    if (c < 0x800) { out[0] = (uint8_t)(0xC0 | (c >> 6)); out[1] = (uint8_t)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (c >> 12));
        out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (c >> 18));
    out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves,
 * the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) become U+0100.. in order. */
static uint32_t gpt2_byte_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) n++;
    return 256 + n;
}

// ----------------------------------------------------------------------------
// Hash maps: open addressing with linear probing, hashed with XXH3.
// imap: 64-bit integer keys (UINT64_MAX marks an empty slot) -> two int32.

typedef struct { uint64_t key; int32_t v0, v1; } imap_slot;
typedef struct { imap_slot *slots; size_t mask, n; } imap;

#define IMAP_EMPTY UINT64_MAX

static inline uint64_t hash_u64(uint64_t k) { return XXH3_64bits(&k, sizeof k); }

static int imap_init(imap *m, size_t expect) {
    size_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return ENG_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = IMAP_EMPTY;
    m->mask = cap - 1;
    m->n = 0;
    return ENG_OK;
}

static void imap_free(imap *m) { free(m->slots); m->slots = NULL; }

static inline const imap_slot *imap_find(const imap *m, uint64_t key) {
    size_t i = (size_t)hash_u64(key) & m->mask;
    for (;;) {
        const imap_slot *s = &m->slots[i];
        if (s->key == key) return s;
        if (s->key == IMAP_EMPTY) return NULL;
        i = (i + 1) & m->mask;
    }
}

/* Inserts key -> (v0, v1); an existing key is overwritten only when `replace`. */
static int imap_put(imap *m, uint64_t key, int32_t v0, int32_t v1, bool replace) {
    if ((m->n + 1) * 2 > m->mask + 1) {
        imap big;
        if (imap_init(&big, m->mask + 1) != ENG_OK) return ENG_ERR_NOMEM;
        for (size_t i = 0; i <= m->mask; i++) {
            const imap_slot *s = &m->slots[i];
            if (s->key == IMAP_EMPTY) continue;
            size_t j = (size_t)hash_u64(s->key) & big.mask;
            while (big.slots[j].key != IMAP_EMPTY) j = (j + 1) & big.mask;
            big.slots[j] = *s;
        }
        big.n = m->n;
        imap_free(m);
        *m = big;
    }
    size_t i = (size_t)hash_u64(key) & m->mask;
    while (m->slots[i].key != IMAP_EMPTY && m->slots[i].key != key) i = (i + 1) & m->mask;
    imap_slot *s = &m->slots[i];
    if (s->key == key && !replace) return ENG_OK;
    if (s->key != key) m->n++;
    s->key = key;
    s->v0 = v0;
    s->v1 = v1;
    return ENG_OK;
}

static inline uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

// ----------------------------------------------------------------------------
// The tokenizer object and its symbol table

typedef struct { uint64_t h; int32_t id; } smap_slot;   /* id == -1: empty */

struct eng_tokenizer {
    int      type;               /* ENG_VOCAB_SPM or ENG_VOCAB_BPE */
    int      pre;                /* PRE_*: BPE pre-tokenizer */
    bool     ignore_merges;      /* llama3: a word that is a token is taken whole */
    bool     add_bos, add_eos, add_space_prefix;
    int32_t  bos, eos, eot, unk; /* -1 when none */
    int32_t  n_vocab;            /* tokens: symbol ids 0..n_vocab-1 */
    int32_t  n_sym, sym_cap;     /* tokens + pseudo symbols */
    char    *blob;               /* symbol texts, each NUL-terminated */
    size_t   blob_len, blob_cap;
    size_t  *sym_off;            /* (n_sym) offset of the text in blob */
    uint32_t *sym_len;           /* (n_sym) */
    float   *score;              /* (n_vocab) SPM merge priority */
    uint8_t *ttype;              /* (n_vocab) TT_* */
    smap_slot *smap;             /* symbol text -> id */
    size_t   smap_mask, smap_n;
    imap     pairs;              /* (left, right) -> (merged or -1, rank) */
    imap     groups;             /* SPM: multi-byte character bytes -> symbol */
    int32_t  byte_sym[256];      /* SPM: one-byte character -> symbol (-1 none); BPE: byte -> symbol */
    int32_t  byte_tok[256];      /* SPM byte fallback token (-1 none) */
    int16_t  gpt2_inv[324];      /* BPE decode: code point -> byte (-1 none) */
    /* special tokens (CONTROL, USER_DEFINED, UNKNOWN) in llama.cpp's matching order:
     * longer texts first, equal lengths by id */
    int32_t  n_special;
    int32_t *special;            /* (n_special) token ids */
    imap     trie;               /* (node << 8 | byte) -> child node */
    int32_t *trie_term;          /* (n_nodes) index into special[] or -1 */
    int32_t  n_nodes, nodes_cap;
    uint8_t  special_first[32];  /* bitmap of the first bytes of special texts */
};

static inline const char *sym_text(const eng_tokenizer *t, int32_t id) { return t->blob + t->sym_off[id]; }

static inline uint64_t text_hash(const void *s, size_t n) { return XXH3_64bits(s, n); }

/* The symbol whose text is s[0..n), or -1. */
static int32_t smap_get(const eng_tokenizer *t, const void *s, size_t n) {
    uint64_t h = text_hash(s, n);
    size_t i = (size_t)h & t->smap_mask;
    for (;;) {
        const smap_slot *sl = &t->smap[i];
        if (sl->id < 0) return -1;
        if (sl->h == h && t->sym_len[sl->id] == n && memcmp(sym_text(t, sl->id), s, n) == 0) return sl->id;
        i = (i + 1) & t->smap_mask;
    }
}

static int smap_grow(eng_tokenizer *t) {
    size_t cap = (t->smap_mask + 1) * 2;
    smap_slot *s = malloc(cap * sizeof *s);
    if (!s) return ENG_ERR_NOMEM;
    for (size_t i = 0; i < cap; i++) s[i].id = -1;
    for (size_t i = 0; i <= t->smap_mask; i++) {
        if (t->smap[i].id < 0) continue;
        size_t j = (size_t)t->smap[i].h & (cap - 1);
        while (s[j].id >= 0) j = (j + 1) & (cap - 1);
        s[j] = t->smap[i];
    }
    free(t->smap);
    t->smap = s;
    t->smap_mask = cap - 1;
    return ENG_OK;
}

/* Maps the text of symbol id to id, replacing an earlier symbol with the same text
 * (llama.cpp: token_to_id[word] = i, the last duplicate wins). */
static int smap_set(eng_tokenizer *t, int32_t id) {
    if ((t->smap_n + 1) * 2 > t->smap_mask + 1 && smap_grow(t) != ENG_OK) return ENG_ERR_NOMEM;
    const char *s = sym_text(t, id);
    size_t n = t->sym_len[id];
    uint64_t h = text_hash(s, n);
    size_t i = (size_t)h & t->smap_mask;
    for (;;) {
        smap_slot *sl = &t->smap[i];
        if (sl->id < 0) { sl->h = h; sl->id = id; t->smap_n++; return ENG_OK; }
        if (sl->h == h && t->sym_len[sl->id] == n && memcmp(sym_text(t, sl->id), s, n) == 0) {
            sl->id = id;
            return ENG_OK;
        }
        i = (i + 1) & t->smap_mask;
    }
}

/* Appends a symbol with text s[0..n) (no map update); returns its id or -1 on OOM. */
static int32_t sym_append(eng_tokenizer *t, const void *s, size_t n) {
    if (t->n_sym == t->sym_cap) {
        int32_t cap = t->sym_cap ? t->sym_cap * 2 : 1024;
        size_t *o = realloc(t->sym_off, (size_t)cap * sizeof *o);
        if (!o) return -1;
        t->sym_off = o;
        uint32_t *l = realloc(t->sym_len, (size_t)cap * sizeof *l);
        if (!l) return -1;
        t->sym_len = l;
        t->sym_cap = cap;
    }
    if (t->blob_len + n + 1 > t->blob_cap) {
        /* s may point into the blob itself (a part of a token's text) */
        uintptr_t u = (uintptr_t)s, b0 = (uintptr_t)t->blob;
        bool inside = t->blob && u >= b0 && u < b0 + t->blob_cap;
        size_t cap = t->blob_cap ? t->blob_cap : 1 << 16;
        while (cap < t->blob_len + n + 1) cap *= 2;
        char *b = realloc(t->blob, cap);
        if (!b) return -1;
        t->blob = b;
        t->blob_cap = cap;
        if (inside) s = b + (u - b0);
    }
    memcpy(t->blob + t->blob_len, s, n);
    t->blob[t->blob_len + n] = '\0';
    t->sym_off[t->n_sym] = t->blob_len;
    t->sym_len[t->n_sym] = (uint32_t)n;
    t->blob_len += n + 1;
    return t->n_sym++;
}

/* The symbol with text s[0..n), created as a pseudo symbol when absent; -1 on OOM. */
static int32_t sym_intern(eng_tokenizer *t, const void *s, size_t n) {
    int32_t id = smap_get(t, s, n);
    if (id >= 0) return id;
    id = sym_append(t, s, n);
    if (id < 0 || smap_set(t, id) != ENG_OK) return -1;
    return id;
}

/* Length of the first character of s[0..n) as llama.cpp's SPM splits text. */
static inline size_t group_len(const uint8_t *s, size_t n) {
    size_t g = utf8_lead_len(s[0]);
    return g < n ? g : n;
}

static inline uint64_t group_key(const uint8_t *s, size_t n) {
    uint64_t k = (uint64_t)n << 32;
    for (size_t i = 0; i < n; i++) k |= (uint64_t)s[i] << (8 * i);
    return k;
}

// ----------------------------------------------------------------------------
// Loading

#define KEY_PREFIX "tokenizer.ggml."

static bool is_numeric_type(uint32_t ty) {
    return ty <= ENG_GGUF_TYPE_BOOL || ty == ENG_GGUF_TYPE_UINT64 || ty == ENG_GGUF_TYPE_INT64 ||
           ty == ENG_GGUF_TYPE_FLOAT64;
}

/* Reads an optional token-id key into *id when it is a valid id; bad types are errors. */
static int read_id_key(const eng_gguf *g, const char *path, const char *key, int32_t n, int32_t *id,
                       char *err, size_t errlen) {
    int64_t v;
    int rc = eng_gguf_get_int(g, key, &v);
    if (rc == ENG_ERR_NOT_FOUND) return ENG_OK;
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "%s: %s: expected an integer token id", path, key);
        return ENG_ERR_FORMAT;
    }
    if (v < 0 || v >= n) {  /* llama.cpp warns and keeps its default: a guess (0xFFFFFFFF often means "none") */
        eng_errf(err, errlen, "%s: %s: %lld is not a token id of this vocabulary (0 to %d); llama.cpp would use "
                 "%d instead, the writer may have meant none: refusing to guess", path, key, (long long)v, n - 1, *id);
        return ENG_ERR_FORMAT;
    }
    *id = (int32_t)v;
    return ENG_OK;
}

static int read_bool_key(const eng_gguf *g, const char *path, const char *key, bool *b, char *err,
                         size_t errlen) {
    int rc = eng_gguf_get_bool(g, key, b);
    if (rc == ENG_ERR_NOT_FOUND || rc == ENG_OK) return ENG_OK;
    eng_errf(err, errlen, "%s: %s: expected a bool", path, key);
    return ENG_ERR_FORMAT;
}

/* The index of an array key holding n numbers, -1 when absent, -2 when malformed. */
static int64_t numeric_array(const eng_gguf *g, const char *key, int32_t n) {
    int64_t i = eng_gguf_find_key(g, key);
    if (i < 0) return -1;
    if (eng_gguf_kv_type(g, i) != ENG_GGUF_TYPE_ARRAY || !is_numeric_type(eng_gguf_arr_type(g, i)) ||
        eng_gguf_arr_n(g, i) != (uint64_t)n)
        return -2;
    return i;
}

static int put_if_join_only(imap *m, uint64_t key, int32_t merged) {
    const imap_slot *s = imap_find(m, key);
    if (s && s->v0 >= 0) return ENG_OK;
    return imap_put(m, key, merged, 0, true);
}

/* SPM: the pair table (every split of every token into two symbols, plus the
 * side-by-side characters inside tokens), the character map and byte fallback. */
static int build_spm(eng_tokenizer *t) {
    int rc = ENG_ERR_NOMEM;
    size_t *b = NULL, bcap = 0;
    if (imap_init(&t->pairs, (size_t)t->n_vocab * 6) != ENG_OK) goto out;
    if (imap_init(&t->groups, 4096) != ENG_OK) goto out;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        size_t tl = t->sym_len[id];
        if (smap_get(t, sym_text(t, id), tl) != id) continue;   /* shadowed duplicate */
        if (tl + 1 > bcap) {
            bcap = 2 * (tl + 1);
            size_t *nb = realloc(b, bcap * sizeof *nb);
            if (!nb) goto out;
            b = nb;
        }
        size_t m = 0;
        b[0] = 0;
        for (size_t pos = 0; pos < tl;) {
            pos += group_len((const uint8_t *)sym_text(t, id) + pos, tl - pos);
            b[++m] = pos;
        }
        if (m < 2) continue;
        /* sym_intern may move the blob: texts are re-read after each call. */
        int32_t first = sym_intern(t, sym_text(t, id), b[1]);
        if (first < 0) goto out;
        int32_t prev = first;
        for (size_t k = 1; k < m; k++) {
            int32_t gk = sym_intern(t, sym_text(t, id) + b[k], b[k + 1] - b[k]);
            if (gk < 0) goto out;
            if (put_if_join_only(&t->pairs, pair_key(prev, gk), -1) != ENG_OK) goto out;
            prev = gk;
            int32_t sa = k == 1 ? first : smap_get(t, sym_text(t, id), b[k]);
            int32_t sb = k == m - 1 ? gk : smap_get(t, sym_text(t, id) + b[k], tl - b[k]);
            if (sa >= 0 && sb >= 0 && put_if_join_only(&t->pairs, pair_key(sa, sb), id) != ENG_OK) goto out;
        }
    }
    for (int i = 0; i < 256; i++) t->byte_sym[i] = -1;
    for (int32_t id = 0; id < t->n_sym; id++) {
        const uint8_t *s = (const uint8_t *)sym_text(t, id);
        size_t n = t->sym_len[id];
        if (n == 0 || group_len(s, n) != n || smap_get(t, s, n) != id) continue;
        if (n == 1) t->byte_sym[s[0]] = id;
        else if (imap_put(&t->groups, group_key(s, n), id, 0, true) != ENG_OK) goto out;
    }
    for (int i = 0; i < 256; i++) {
        char hex[8];
        snprintf(hex, sizeof hex, "<0x%02X>", i);
        int32_t id = smap_get(t, hex, 6);
        if (id < 0 || id >= t->n_vocab) {
            uint8_t c = (uint8_t)i;
            id = smap_get(t, &c, 1);
        }
        t->byte_tok[i] = (id >= 0 && id < t->n_vocab) ? id : t->unk;
    }
    rc = ENG_OK;
out:
    free(b);
    return rc;
}

/* GPT-2: byte symbols, the decode map and the merge ranks. */
static int build_bpe(eng_tokenizer *t, const eng_gguf *g, const char *path, char *err, size_t errlen) {
    int rc = ENG_ERR_NOMEM;
    char *cat = NULL;
    size_t ccap = 0;
    for (int i = 0; i < 324; i++) t->gpt2_inv[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint8_t u[4];
        uint32_t cp = gpt2_byte_cp((uint8_t)b);
        t->gpt2_inv[cp] = (int16_t)b;
        t->byte_sym[b] = sym_intern(t, u, utf8_encode(cp, u));
        if (t->byte_sym[b] < 0) return ENG_ERR_NOMEM;
    }
    int64_t mi = eng_gguf_find_key(g, KEY_PREFIX "merges");
    if (mi < 0 || eng_gguf_kv_type(g, mi) != ENG_GGUF_TYPE_ARRAY ||
        eng_gguf_arr_type(g, mi) != ENG_GGUF_TYPE_STRING || eng_gguf_arr_n(g, mi) > INT32_MAX) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "merges: %s", path,
                 mi < 0 ? "missing (a gpt2 tokenizer needs its merges)" : "expected an array of strings");
        return ENG_ERR_FORMAT;
    }
    uint64_t nm = eng_gguf_arr_n(g, mi);
    if (imap_init(&t->pairs, (size_t)nm) != ENG_OK) goto out;
    for (uint64_t i = 0; i < nm; i++) {
        const char *s;
        size_t n;
        if (eng_gguf_get_arr_str(g, mi, i, &s, &n) != ENG_OK) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "merges[%llu]: unreadable", path, (unsigned long long)i);
            rc = ENG_ERR_FORMAT;
            goto out;
        }
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;   /* llama.cpp: find(' ', 1) */
        if (!sp) continue;
        size_t na = (size_t)(sp - s), nb = n - na - 1;
        if (n > ccap) {
            ccap = 2 * n;
            char *c = realloc(cat, ccap);
            if (!c) goto out;
            cat = c;
        }
        memcpy(cat, s, na);
        memcpy(cat + na, sp + 1, nb);
        int32_t a = sym_intern(t, s, na), bb = sym_intern(t, sp + 1, nb), r = sym_intern(t, cat, na + nb);
        if (a < 0 || bb < 0 || r < 0) goto out;
        if (imap_put(&t->pairs, pair_key(a, bb), r, (int32_t)i, false) != ENG_OK) goto out;  /* first rank wins */
    }
    rc = ENG_OK;
out:
    free(cat);
    return rc;
}

static int special_cmp(const void *pa, const void *pb, void *ctx) {
    const eng_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (t->sym_len[a] != t->sym_len[b]) return t->sym_len[a] > t->sym_len[b] ? -1 : 1;
    return (a > b) - (a < b);
}

/* The list of special tokens in matching order, and a byte trie over their texts. */
static int build_specials(eng_tokenizer *t) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->ttype[id] == TT_CONTROL || t->ttype[id] == TT_USER_DEFINED || t->ttype[id] == TT_UNKNOWN) n++;
    t->special = malloc(((size_t)n + 1) * sizeof *t->special);
    if (!t->special) return ENG_ERR_NOMEM;
    n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->ttype[id] == TT_CONTROL || t->ttype[id] == TT_USER_DEFINED || t->ttype[id] == TT_UNKNOWN)
            t->special[n++] = id;
    t->n_special = n;
    qsort_r(t->special, (size_t)n, sizeof *t->special, special_cmp, t);
    if (imap_init(&t->trie, 64) != ENG_OK) return ENG_ERR_NOMEM;
    t->nodes_cap = 64;
    t->trie_term = malloc((size_t)t->nodes_cap * sizeof *t->trie_term);
    if (!t->trie_term) return ENG_ERR_NOMEM;
    t->trie_term[0] = -1;
    t->n_nodes = 1;
    for (int32_t k = 0; k < n; k++) {
        const uint8_t *s = (const uint8_t *)sym_text(t, t->special[k]);
        size_t len = t->sym_len[t->special[k]];
        int32_t node = 0;
        for (size_t i = 0; i < len; i++) {
            uint64_t key = ((uint64_t)node << 8) | s[i];
            const imap_slot *c = imap_find(&t->trie, key);
            if (c) { node = c->v0; continue; }
            if (t->n_nodes == t->nodes_cap) {
                int32_t *nt = realloc(t->trie_term, (size_t)t->nodes_cap * 2 * sizeof *nt);
                if (!nt) return ENG_ERR_NOMEM;
                t->trie_term = nt;
                t->nodes_cap *= 2;
            }
            t->trie_term[t->n_nodes] = -1;
            if (imap_put(&t->trie, key, t->n_nodes, 0, true) != ENG_OK) return ENG_ERR_NOMEM;
            node = t->n_nodes++;
        }
        if (t->trie_term[node] < 0) t->trie_term[node] = k;   /* equal texts: the first in order */
        t->special_first[s[0] >> 3] |= (uint8_t)(1u << (s[0] & 7));
    }
    return ENG_OK;
}

/* tokenizer.ggml.pre -> pre-tokenizer, as llama.cpp's llama_vocab::load maps them. */
static int parse_pre(eng_tokenizer *t, const char *s, size_t n) {
    static const char *gpt2[] = {"default", "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                                 "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo",
                                 "jais", NULL};
    static const char *llama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", NULL};
    static const char *llama3_like[] = {"dbrx", "smaug-bpe", NULL};
    static const char *qwen2[] = {"qwen2", "stablelm2", "megrez", NULL};
#define IN(list) for (int i = 0; list[i]; i++) if (strlen(list[i]) == n && !memcmp(list[i], s, n))
    IN(gpt2) { t->pre = PRE_GPT2; return ENG_OK; }
    IN(llama3) { t->pre = PRE_LLAMA3; t->ignore_merges = true; t->add_bos = true; return ENG_OK; }
    IN(llama3_like) { t->pre = PRE_LLAMA3; return ENG_OK; }
    IN(qwen2) { t->pre = PRE_QWEN2; return ENG_OK; }
#undef IN
    return ENG_ERR_UNSUPPORTED;
}

int eng_tokenizer_load(const eng_gguf *g, eng_tokenizer **out, char *err, size_t errlen) {
    ENG_ASSERT(g && out);
    *out = NULL;
    pthread_once(&bmp_once, bmp_build);
    const char *path = eng_gguf_path(g) ? eng_gguf_path(g) : "(gguf)";
    const char *model, *s;
    size_t model_n, n;
    int rc = eng_gguf_get_str(g, KEY_PREFIX "model", &model, &model_n);
    if (rc == ENG_ERR_NOT_FOUND) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "model: missing (the file has no tokenizer)", path);
        return ENG_ERR_NOT_FOUND;
    }
    if (rc != ENG_OK) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "model: expected a string", path);
        return ENG_ERR_FORMAT;
    }
    int type;
    if (model_n == 5 && !memcmp(model, "llama", 5)) type = ENG_VOCAB_SPM;
    else if (model_n == 4 && !memcmp(model, "gpt2", 4)) type = ENG_VOCAB_BPE;
    else {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "model: unsupported tokenizer '%.*s' (supported: llama, gpt2)",
                 path, (int)(model_n > 64 ? 64 : model_n), model);
        return ENG_ERR_UNSUPPORTED;
    }
    int64_t ti = eng_gguf_find_key(g, KEY_PREFIX "tokens");
    if (ti < 0 || eng_gguf_kv_type(g, ti) != ENG_GGUF_TYPE_ARRAY || eng_gguf_arr_type(g, ti) != ENG_GGUF_TYPE_STRING ||
        eng_gguf_arr_n(g, ti) == 0 || eng_gguf_arr_n(g, ti) > (uint64_t)INT32_MAX / 4) {
        eng_errf(err, errlen, "%s: " KEY_PREFIX "tokens: %s", path,
                 ti < 0 ? "missing" : "expected a non-empty array of strings");
        return ENG_ERR_FORMAT;
    }
    eng_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ENG_ERR_NOMEM;
    rc = ENG_ERR_NOMEM;
    t->type = type;
    t->n_vocab = (int32_t)eng_gguf_arr_n(g, ti);
    size_t cap = 1024;
    while (cap < 2 * ((size_t)t->n_vocab + 1024)) cap *= 2;
    t->smap = malloc(cap * sizeof *t->smap);
    t->score = calloc((size_t)t->n_vocab, sizeof *t->score);
    t->ttype = malloc((size_t)t->n_vocab);
    if (!t->smap || !t->score || !t->ttype) goto fail;
    for (size_t i = 0; i < cap; i++) t->smap[i].id = -1;
    t->smap_mask = cap - 1;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (eng_gguf_get_arr_str(g, ti, (uint64_t)i, &s, &n) != ENG_OK) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "tokens[%d]: unreadable", path, i);
            rc = ENG_ERR_FORMAT;
            goto fail;
        }
        char empty[32];
        if (n == 0) {   /* llama.cpp renames empty tokens */
            n = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%d]", i);
            s = empty;
        }
        if (sym_append(t, s, n) != i) goto fail;
    }
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (smap_set(t, i) != ENG_OK) goto fail;

    int64_t si = numeric_array(g, KEY_PREFIX "scores", t->n_vocab);
    int64_t yi = numeric_array(g, KEY_PREFIX "token_type", t->n_vocab);
    if (si == -2 || yi == -2) {
        eng_errf(err, errlen, "%s: %s: expected an array of %d numbers", path,
                 si == -2 ? KEY_PREFIX "scores" : KEY_PREFIX "token_type", t->n_vocab);
        rc = ENG_ERR_FORMAT;
        goto fail;
    }
    for (int32_t i = 0; i < t->n_vocab; i++) {
        double v = si >= 0 ? eng_gguf_get_arr_num(g, si, (uint64_t)i) : 0.0;
        t->score[i] = isnan(v) ? -INFINITY : (float)v;
        double y = yi >= 0 ? eng_gguf_get_arr_num(g, yi, (uint64_t)i) : TT_NORMAL;
        t->ttype[i] = (y >= TT_NORMAL && y <= TT_BYTE && y == floor(y)) ? (uint8_t)y : TT_UNDEFINED;
    }

    /* Special ids and flags: llama.cpp's defaults, then the keys. */
    bool spm = type == ENG_VOCAB_SPM;
    t->bos = spm && t->n_vocab > 1 ? 1 : -1;
    t->eos = spm && t->n_vocab > 2 ? 2 : -1;
    t->unk = spm ? 0 : -1;
    t->eot = -1;
    t->add_bos = spm;
    t->add_eos = false;
    t->add_space_prefix = spm;
    if (!spm) {
        const char *pre = NULL;
        size_t pre_n = 0;
        int prc = eng_gguf_get_str(g, KEY_PREFIX "pre", &pre, &pre_n);
        if (prc == ENG_ERR_TYPE) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "pre: expected a string", path);
            rc = ENG_ERR_FORMAT;
            goto fail;
        }
        if (prc == ENG_OK && parse_pre(t, pre, pre_n) != ENG_OK) {
            eng_errf(err, errlen, "%s: " KEY_PREFIX "pre: unsupported pre-tokenizer '%.*s'", path,
                     (int)(pre_n > 64 ? 64 : pre_n), pre);
            rc = ENG_ERR_UNSUPPORTED;
            goto fail;
        }
    }
    if ((rc = read_id_key(g, path, KEY_PREFIX "bos_token_id", t->n_vocab, &t->bos, err, errlen)) ||
        (rc = read_id_key(g, path, KEY_PREFIX "eos_token_id", t->n_vocab, &t->eos, err, errlen)) ||
        (rc = read_id_key(g, path, KEY_PREFIX "unknown_token_id", t->n_vocab, &t->unk, err, errlen)) ||
        (rc = read_id_key(g, path, KEY_PREFIX "eot_token_id", t->n_vocab, &t->eot, err, errlen)) ||
        (rc = read_bool_key(g, path, KEY_PREFIX "add_bos_token", &t->add_bos, err, errlen)) ||
        (rc = read_bool_key(g, path, KEY_PREFIX "add_eos_token", &t->add_eos, err, errlen)) ||
        (rc = read_bool_key(g, path, KEY_PREFIX "add_space_prefix", &t->add_space_prefix, err, errlen)))
        goto fail;
    if (t->unk >= t->n_vocab) t->unk = -1;
    if (t->eot < 0) {   /* llama.cpp finds the end-of-turn token by its text and makes it CONTROL */
        static const char *eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<EOT>", "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
                                          NULL};
        for (int i = 0; eot_texts[i] && t->eot < 0; i++) {
            int32_t id = smap_get(t, eot_texts[i], strlen(eot_texts[i]));
            if (id < 0 || id >= t->n_vocab) continue;
            t->eot = id;
            t->ttype[id] = TT_CONTROL;
        }
    }
    rc = spm ? build_spm(t) : build_bpe(t, g, path, err, errlen);
    if (rc != ENG_OK) goto fail;
    if ((rc = build_specials(t)) != ENG_OK) goto fail;
    *out = t;
    return ENG_OK;
fail:
    if (rc == ENG_ERR_NOMEM) eng_errf(err, errlen, "%s: tokenizer: out of memory", path);
    eng_tokenizer_free(t);
    return rc;
}

void eng_tokenizer_free(eng_tokenizer *t) {
    if (!t) return;
    free(t->blob);
    free(t->sym_off);
    free(t->sym_len);
    free(t->score);
    free(t->ttype);
    free(t->smap);
    imap_free(&t->pairs);
    imap_free(&t->groups);
    free(t->special);
    imap_free(&t->trie);
    free(t->trie_term);
    free(t);
}

int     eng_tokenizer_type(const eng_tokenizer *t) { ENG_ASSERT(t); return t->type; }
int32_t eng_tokenizer_n_vocab(const eng_tokenizer *t) { ENG_ASSERT(t); return t->n_vocab; }
int32_t eng_tokenizer_bos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->bos; }
int32_t eng_tokenizer_eos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->eos; }
int32_t eng_tokenizer_eot(const eng_tokenizer *t) { ENG_ASSERT(t); return t->eot; }
bool    eng_tokenizer_add_bos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->add_bos && t->bos >= 0; }
bool    eng_tokenizer_add_eos(const eng_tokenizer *t) { ENG_ASSERT(t); return t->add_eos && t->eos >= 0; }

const char *eng_token_piece(const eng_tokenizer *t, int32_t id, size_t *len) {
    ENG_ASSERT(t);
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->sym_len[id];
    return sym_text(t, id);
}

int32_t eng_token_lookup(const eng_tokenizer *t, const char *text, size_t len) {
    ENG_ASSERT(t);
    int32_t id = smap_get(t, text ? text : "", text ? len : 0);
    return id < t->n_vocab ? id : -1;
}

// ----------------------------------------------------------------------------
// GPT-2 style pre-tokenizers: llama.cpp's hand-written versions of the regexes,
// over code points cp[0..n) with classes cls[0..n). They write the end index
// of each word into ends[] and return the word count (words tile [0, n)).

#define CLS(p) ((p) < n ? cls[p] : 0)
#define CPT(p) ((p) < n ? cp[p] : 0xFFFFFFFFu)
#define ADD(e) do { if ((e) > prev) { ends[nw++] = (int32_t)(e); prev = (e); } } while (0)

static inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when `fold`): the length matched at pos, or 0. */
static size_t contraction(const uint32_t *cp, size_t n, size_t pos, bool fold) {
    if (cp[pos] != '\'' || pos + 1 >= n) return 0;
    uint32_t c1 = fold ? ascii_lower(cp[pos + 1]) : cp[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= n) return 0;
    uint32_t c2 = fold ? ascii_lower(cp[pos + 2]) : cp[pos + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t split_gpt2(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        size_t k = contraction(cp, n, pos, false);
        if (k) { pos += k; ADD(pos); continue; }
        uint8_t c2 = cp[pos] == ' ' ? CLS(pos + 1) : cls[pos];
        if (c2 == CF_L || c2 == CF_N || c2 == CF_O) {   /* ' ?' then a run of one class */
            pos += cp[pos] == ' ';
            while (CLS(pos) == c2) pos++;
            ADD(pos);
            continue;
        }
        size_t w = 0;
        while (CLS(pos + w) == CF_WS) w++;
        if (w > 1 && pos + w < n) pos += w - 1;          /* \s+(?!\S): leave the last one */
        else if (w > 0) pos += w;                        /* \s+ */
        else pos++;
        ADD(pos);
    }
    return nw;
}

/* Llama 3 (max_digits 3): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   and Qwen 2 (max_digits 1: \p{N}). */
static size_t split_llama3(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends, size_t max_digits) {
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        uint32_t c = cp[pos];
        uint8_t f = cls[pos];
        size_t k = contraction(cp, n, pos, true);
        if (k) { pos += k; ADD(pos); continue; }
        if (!(c == '\r' || c == '\n' || f == CF_N) && (f == CF_L || CLS(pos + 1) == CF_L)) {
            pos++;
            while (CLS(pos) == CF_L) pos++;
            ADD(pos);
            continue;
        }
        if (f == CF_N) {
            size_t ini = pos;
            while (CLS(pos) == CF_N) {
                if (++pos - ini >= max_digits) { ADD(pos); ini = pos; }
            }
            ADD(pos);
            continue;
        }
        uint8_t f2 = c == ' ' ? CLS(pos + 1) : f;
        if (!(f2 == CF_WS || f2 == CF_L || f2 == CF_N)) {   /* f is never 0 here */
            pos += c == ' ';
            while (CLS(pos) == CF_O) pos++;
            while (CPT(pos) == '\r' || CPT(pos) == '\n') pos++;
            ADD(pos);
            continue;
        }
        size_t w = 0, last_rn = 0;
        while (CLS(pos + w) == CF_WS) {
            if (cp[pos + w] == '\r' || cp[pos + w] == '\n') last_rn = pos + w + 1;
            w++;
        }
        if (last_rn > 0) pos = last_rn;                  /* \s*[\r\n]+ */
        else if (w > 1 && pos + w < n) pos += w - 1;     /* \s+(?!\S) */
        else if (w > 0) pos += w;                        /* \s+ */
        else pos++;
        ADD(pos);
    }
    return nw;
}

#undef CLS
#undef CPT
#undef ADD

// ----------------------------------------------------------------------------
// Tokenizing: a session holds one call's scratch buffers

typedef struct { int32_t id, start, n, prev, next; } symbol;   /* n == 0: merged away */
typedef struct { float score; int32_t rank, left, right, id_right, merged; } bigram;
typedef struct { int64_t off, len; int32_t tok; } frag;           /* tok >= 0: a special token */

typedef struct {
    const eng_tokenizer *t;
    bool      spm, oom;
    int32_t  *ids, *offs;                  /* output (n, cap) */
    size_t    n, cap;
    uint8_t  *buf;                         /* SPM: escaped text; BPE: a word's encoded text */
    int32_t  *orig;                        /* SPM: input offset of each buf byte */
    size_t    buf_cap;
    uint32_t *cps;                         /* BPE: code points of a fragment (cp_cap) */
    uint8_t  *cls, *clen;                  /* their classes and input lengths */
    int32_t  *corig, *ends;                /* their input offsets; word ends */
    size_t    cp_cap;
    symbol   *syms;                        /* (syms_cap) */
    size_t    syms_cap;
    bigram   *heap;                        /* binary heap, best first */
    size_t    heap_n, heap_cap;
    frag     *frags, *frags2;              /* (frags_cap) */
    size_t    n_frags, frags_cap;
} session;

static void session_free(session *s) {
    free(s->ids); free(s->offs); free(s->buf); free(s->orig);
    free(s->cps); free(s->cls); free(s->clen); free(s->corig); free(s->ends);
    free(s->syms); free(s->heap); free(s->frags); free(s->frags2);
}

/* realloc *p to hold `need` elements; false (and *p untouched) on failure. */
static bool resize(void *pp, size_t need, size_t elem) {
    void **p = pp;
    void *q = realloc(*p, (need ? need : 1) * elem);
    if (!q) return false;
    *p = q;
    return true;
}

static inline size_t grown(size_t cap, size_t need) { return need > 2 * cap ? need : 2 * cap; }

static void emit(session *s, int32_t id, int64_t off) {
    if (s->n == s->cap) {
        size_t c = grown(s->cap, 256);
        if (!resize(&s->ids, c, sizeof *s->ids) || !resize(&s->offs, c, sizeof *s->offs)) { s->oom = true; return; }
        s->cap = c;
    }
    s->ids[s->n] = id;
    s->offs[s->n] = (int32_t)off;
    s->n++;
}

static bool reserve_syms(session *s, size_t need) {
    if (need <= s->syms_cap) return true;
    size_t c = grown(s->syms_cap, need);
    if (!resize(&s->syms, c, sizeof *s->syms)) return false;
    s->syms_cap = c;
    return true;
}

static inline bool bigram_before(const bigram *a, const bigram *b, bool spm) {
    if (spm) {
        if (a->score != b->score) return a->score > b->score;   /* higher score first */
    } else if (a->rank != b->rank) {
        return a->rank < b->rank;                               /* lower rank first */
    }
    return a->left < b->left;                                   /* then leftmost */
}

static void heap_push(session *s, const bigram *g) {
    if (s->heap_n == s->heap_cap) {
        size_t c = grown(s->heap_cap, 64);
        if (!resize(&s->heap, c, sizeof *s->heap)) { s->oom = true; return; }
        s->heap_cap = c;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_before(g, &s->heap[p], s->spm)) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = *g;
}

static bigram heap_pop(session *s) {
    bigram top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&s->heap[c + 1], &s->heap[c], s->spm)) c++;
        if (!bigram_before(&s->heap[c], &last, s->spm)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* Queues the merge of symbols l and r when the pair is in the table. */
static void try_add(session *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    int32_t a = s->syms[l].id, b = s->syms[r].id;
    if (a < 0 || b < 0) return;
    const imap_slot *p = imap_find(&s->t->pairs, pair_key(a, b));
    if (!p || p->v0 < 0) return;
    bigram g = {s->spm ? s->t->score[p->v0] : 0.0f, p->v1, l, r, b, p->v0};
    heap_push(s, &g);
}

/* Runs the queued merges to the end (llama.cpp's work_queue loop). A stale entry
 * (either side merged away, or the right side grown since) is skipped. */
static void merge_all(session *s) {
    while (s->heap_n) {
        bigram g = heap_pop(s);
        symbol *l = &s->syms[g.left], *r = &s->syms[g.right];
        if (l->n == 0 || r->n == 0 || l->next != g.right || r->id != g.id_right) continue;
        l->id = g.merged;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (l->next >= 0) s->syms[l->next].prev = g.left;
        try_add(s, l->prev, g.left);
        try_add(s, g.left, s->syms[g.left].next);
    }
}

// SPM ------------------------------------------------------------------------

static void spm_emit(session *s, const symbol *y) {
    const eng_tokenizer *t = s->t;
    if (y->id >= 0 && y->id < t->n_vocab) {
        emit(s, y->id, s->orig[y->start]);
        return;
    }
    for (int32_t k = y->start; k < y->start + y->n; k++)   /* byte fallback */
        if (t->byte_tok[s->buf[k]] >= 0) emit(s, t->byte_tok[s->buf[k]], s->orig[k]);
}

/* One text fragment: spaces become U+2581, the dummy prefix goes first when
 * asked, then characters are merged segment by segment (see the file top). */
static void spm_fragment(session *s, const uint8_t *text, int64_t off, int64_t len, bool dummy) {
    const eng_tokenizer *t = s->t;
    size_t need = (size_t)len * 3 + 3;
    if (need > s->buf_cap) {
        size_t c = grown(s->buf_cap, need);
        if (!resize(&s->buf, c, 1) || !resize(&s->orig, c, sizeof *s->orig)) { s->oom = true; return; }
        s->buf_cap = c;
    }
    size_t p = 0;
    for (int64_t i = dummy ? -1 : 0; i < len; i++) {
        if (i < 0 || text[off + i] == ' ') {
            memcpy(s->buf + p, "\xE2\x96\x81", 3);
            s->orig[p] = s->orig[p + 1] = s->orig[p + 2] = (int32_t)(off + (i < 0 ? 0 : i));
            p += 3;
        } else {
            s->buf[p] = text[off + i];
            s->orig[p++] = (int32_t)(off + i);
        }
    }
    if (!reserve_syms(s, p)) { s->oom = true; return; }
    int32_t ns = 0;
    for (size_t q = 0; q < p;) {
        size_t gl = group_len(s->buf + q, p - q);
        int32_t id;
        if (gl == 1) {
            id = t->byte_sym[s->buf[q]];
        } else {
            const imap_slot *g = imap_find(&t->groups, group_key(s->buf + q, gl));
            id = g ? g->v0 : -1;
        }
        s->syms[ns++] = (symbol){id, (int32_t)q, (int32_t)gl, -1, -1};
        q += gl;
    }
    int32_t a = 0;
    s->heap_n = 0;
    for (int32_t k = 0; k < ns; k++) {
        symbol *y = &s->syms[k];
        y->prev = k > a ? k - 1 : -1;
        y->next = -1;
        if (k + 1 < ns && y->id >= 0 && s->syms[k + 1].id >= 0) {
            int32_t b = s->syms[k + 1].id;
            const imap_slot *pr = imap_find(&t->pairs, pair_key(y->id, b));
            if (pr) {   /* joinable: the segment goes on */
                y->next = k + 1;
                if (pr->v0 >= 0) {
                    bigram g = {t->score[pr->v0], 0, k, k + 1, b, pr->v0};
                    heap_push(s, &g);
                }
                continue;
            }
        }
        merge_all(s);
        for (int32_t i = a; i >= 0; i = s->syms[i].next) spm_emit(s, &s->syms[i]);
        a = k + 1;
    }
}

// GPT-2 BPE ------------------------------------------------------------------

static void bpe_emit(session *s, const symbol *y) {
    const eng_tokenizer *t = s->t;
    if (y->id < t->n_vocab) {
        emit(s, y->id, y->start);
        return;
    }
    /* not a token: llama.cpp looks each byte of the text up as a token */
    const char *txt = sym_text(t, y->id);
    for (uint32_t k = 0; k < t->sym_len[y->id]; k++) {
        int32_t id = smap_get(t, txt + k, 1);
        if (id >= 0 && id < t->n_vocab) emit(s, id, y->start);
    }
}

/* One pre-tokenizer word: code points [a, b) of the fragment. Symbols are the
 * bytes of their UTF-8 forms; symbol.start holds the input offset. */
static void bpe_word(session *s, size_t a, size_t b) {
    const eng_tokenizer *t = s->t;
    if (!reserve_syms(s, 4 * (b - a))) { s->oom = true; return; }
    int32_t ns = 0;
    for (size_t i = a; i < b; i++) {
        uint8_t u[4];
        size_t l = utf8_encode(s->cps[i], u);
        for (size_t j = 0; j < l; j++) {
            int32_t at = s->corig[i] + (int32_t)(j < s->clen[i] ? j : s->clen[i] - 1u);
            s->syms[ns] = (symbol){t->byte_sym[u[j]], at, 1, ns - 1, ns + 1};
            ns++;
        }
    }
    s->syms[ns - 1].next = -1;
    if (t->ignore_merges) {   /* llama3: a word that is itself a token is taken whole */
        size_t need = 2 * (size_t)ns;
        if (need > s->buf_cap) {
            if (!resize(&s->buf, need, 1)) { s->oom = true; return; }
            s->buf_cap = need;   /* orig is unused for BPE */
        }
        size_t p = 0;
        for (int32_t k = 0; k < ns; k++) {
            int32_t id = s->syms[k].id;
            memcpy(s->buf + p, sym_text(t, id), t->sym_len[id]);
            p += t->sym_len[id];
        }
        int32_t id = smap_get(t, s->buf, p);
        if (id >= 0 && id < t->n_vocab) {
            emit(s, id, s->syms[0].start);
            return;
        }
    }
    s->heap_n = 0;
    for (int32_t k = 0; k + 1 < ns; k++) try_add(s, k, k + 1);
    merge_all(s);
    for (int32_t i = 0; i >= 0; i = s->syms[i].next) bpe_emit(s, &s->syms[i]);
}

static void bpe_fragment(session *s, const uint8_t *text, int64_t off, int64_t len) {
    const eng_tokenizer *t = s->t;
    if ((size_t)len > s->cp_cap) {
        size_t c = grown(s->cp_cap, (size_t)len);
        if (!resize(&s->cps, c, sizeof *s->cps) || !resize(&s->cls, c, 1) || !resize(&s->clen, c, 1) ||
            !resize(&s->corig, c, sizeof *s->corig) || !resize(&s->ends, c, sizeof *s->ends)) {
            s->oom = true;
            return;
        }
        s->cp_cap = c;
    }
    size_t nc = 0;
    for (size_t i = 0; i < (size_t)len;) {
        size_t l;
        uint32_t c = utf8_decode(text + off, (size_t)len, i, &l);
        s->cps[nc] = c;
        s->cls[nc] = c < 0x80 ? bmp_cls[c] : uni_class(c);
        s->clen[nc] = (uint8_t)l;
        s->corig[nc] = (int32_t)(off + (int64_t)i);
        nc++;
        i += l;
    }
    size_t nw = t->pre == PRE_GPT2 ? split_gpt2(s->cps, s->cls, nc, s->ends)
                                   : split_llama3(s->cps, s->cls, nc, s->ends, t->pre == PRE_QWEN2 ? 1 : 3);
    size_t a = 0;
    for (size_t w = 0; w < nw && !s->oom; w++) {
        bpe_word(s, a, (size_t)s->ends[w]);
        a = (size_t)s->ends[w];
    }
    if (a < nc && !s->oom) bpe_word(s, a, nc);
}

// Special tokens ------------------------------------------------------------

static bool push_frag(session *s, frag **v, size_t *n, frag f) {
    if (*n == s->frags_cap) {
        size_t c = grown(s->frags_cap, 16);
        if (!resize(&s->frags, c, sizeof(frag)) || !resize(&s->frags2, c, sizeof(frag))) return false;
        s->frags_cap = c;   /* *v follows: it points at s->frags or s->frags2 */
    }
    (*v)[(*n)++] = f;
    return true;
}

/* llama.cpp's tokenizer_st_partition: for each special token, longest first,
 * every raw fragment is cut at its leftmost non-overlapping occurrences.
 * CONTROL and UNKNOWN tokens take part only with parse_special; USER_DEFINED
 * ones always do. A trie pass first finds which special texts occur at all,
 * so only those are searched for. */
static void partition(session *s, const uint8_t *text, int64_t len, bool parse_special) {
    const eng_tokenizer *t = s->t;
    s->n_frags = 0;
    if (len == 0) return;   /* no fragment at all: "" gives no token, not a lone dummy prefix */
    if (!push_frag(s, &s->frags, &s->n_frags, (frag){0, len, -1})) { s->oom = true; return; }
    if (t->n_special == 0) return;
    uint8_t *present = calloc((size_t)t->n_special, 1);
    if (!present) { s->oom = true; return; }
    bool any = false;
    for (int64_t p = 0; p < len; p++) {
        uint8_t c = text[p];
        if (!(t->special_first[c >> 3] & (1u << (c & 7)))) continue;
        int32_t node = 0;
        for (int64_t q = p; q < len; q++) {
            const imap_slot *ch = imap_find(&t->trie, ((uint64_t)node << 8) | text[q]);
            if (!ch) break;
            node = ch->v0;
            int32_t k = t->trie_term[node];
            if (k >= 0 && (parse_special || t->ttype[t->special[k]] == TT_USER_DEFINED)) present[k] = any = 1;
        }
    }
    for (int32_t k = 0; any && k < t->n_special; k++) {
        if (!present[k]) continue;
        int32_t id = t->special[k];
        const char *st = sym_text(t, id);
        size_t sl = t->sym_len[id];
        size_t n2 = 0;
        for (size_t i = 0; i < s->n_frags; i++) {
            frag f = s->frags[i];
            bool ok = true;
            if (f.tok >= 0) {
                ok = push_frag(s, &s->frags2, &n2, f);
            } else {
                int64_t pos = f.off, end = f.off + f.len;
                while (ok && pos < end) {
                    const uint8_t *hit = memmem(text + pos, (size_t)(end - pos), st, sl);
                    if (!hit) break;
                    int64_t h = hit - text;
                    if (h > pos) ok = push_frag(s, &s->frags2, &n2, (frag){pos, h - pos, -1});
                    ok = ok && push_frag(s, &s->frags2, &n2, (frag){h, (int64_t)sl, id});
                    pos = h + (int64_t)sl;
                }
                if (ok && pos < end) ok = push_frag(s, &s->frags2, &n2, (frag){pos, end - pos, -1});
            }
            if (!ok) { s->oom = true; free(present); return; }
        }
        frag *tmp = s->frags;
        s->frags = s->frags2;
        s->frags2 = tmp;
        s->n_frags = n2;
    }
    free(present);
}

// ----------------------------------------------------------------------------
// Public tokenize / detokenize

int32_t eng_tokenize(const eng_tokenizer *t, const char *text, size_t len, bool add_bos, bool add_eos,
                     bool parse_special, int32_t *out, int32_t cap, int32_t *offsets) {
    ENG_ASSERT(t);
    ENG_ASSERT(text || len == 0);
    if (len > (size_t)INT32_MAX / 4) return TOK_FAIL;
    const uint8_t *u = text ? (const uint8_t *)text : (const uint8_t *)"";
    session s = {.t = t, .spm = t->type == ENG_VOCAB_SPM};
    if (add_bos && t->bos >= 0) emit(&s, t->bos, 0);
    partition(&s, u, (int64_t)len, parse_special);
    bool prev_special = true;   /* SPM: the dummy prefix starts the text and follows special tokens */
    for (size_t i = 0; i < s.n_frags && !s.oom; i++) {
        frag f = s.frags[i];
        if (f.tok >= 0) {
            emit(&s, f.tok, f.off);
            prev_special = true;
            continue;
        }
        if (s.spm) spm_fragment(&s, u, f.off, f.len, t->add_space_prefix && prev_special);
        else bpe_fragment(&s, u, f.off, f.len);
        prev_special = false;
    }
    if (add_eos && t->eos >= 0) emit(&s, t->eos, (int64_t)len);
    int32_t rc;
    if (s.oom) {
        rc = TOK_FAIL;
    } else if (s.n > (size_t)(cap > 0 ? cap : 0)) {
        rc = -(int32_t)s.n;
    } else {
        if (s.n) memcpy(out, s.ids, s.n * sizeof *out);
        if (s.n && offsets) memcpy(offsets, s.offs, s.n * sizeof *offsets);
        rc = (int32_t)s.n;
    }
    session_free(&s);
    return rc;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int64_t eng_detokenize(const eng_tokenizer *t, const int32_t *ids, int32_t n, bool render_special, char *out,
                       size_t cap) {
    ENG_ASSERT(t);
    ENG_ASSERT(ids || n <= 0);
    ENG_ASSERT(out || cap == 0);
    size_t total = 0;
#define PUT(p, k) do { size_t k_ = (k); if (k_ && total + k_ <= cap) memcpy(out + total, (p), k_); total += k_; } while (0)
    bool spm = t->type == ENG_VOCAB_SPM;
    bool strip = spm && t->add_space_prefix;   /* the next text piece starts with the dummy space */
    for (int32_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab) continue;
        const char *txt = sym_text(t, id);
        size_t tl = t->sym_len[id];
        uint8_t ty = t->ttype[id];
        if (ty == TT_CONTROL || ty == TT_UNKNOWN || ty == TT_USER_DEFINED) {
            if (render_special || ty == TT_USER_DEFINED) PUT(txt, tl);
            strip = spm && t->add_space_prefix;
            continue;
        }
        if (!spm) {   /* GPT-2: undo the byte-to-unicode map */
            for (size_t j = 0; j < tl;) {
                size_t l;
                uint32_t c = utf8_decode((const uint8_t *)txt, tl, j, &l);
                if (c < 324 && t->gpt2_inv[c] >= 0) {
                    uint8_t b = (uint8_t)t->gpt2_inv[c];
                    PUT(&b, 1);
                } else {
                    PUT(txt + j, l);
                }
                j += l;
            }
            continue;
        }
        if (ty == TT_BYTE && tl == 6 && !memcmp(txt, "<0x", 3) && txt[5] == '>' && hexval(txt[3]) >= 0 &&
            hexval(txt[4]) >= 0) {
            uint8_t b = (uint8_t)(hexval(txt[3]) * 16 + hexval(txt[4]));
            PUT(&b, 1);
            strip = false;
            continue;
        }
        size_t j = 0;
        if (strip && tl >= 3 && !memcmp(txt, "\xE2\x96\x81", 3)) j = 3;
        strip = false;
        while (j < tl) {   /* U+2581 -> ' ' */
            const char *u = memmem(txt + j, tl - j, "\xE2\x96\x81", 3);
            size_t stop = u ? (size_t)(u - txt) : tl;
            PUT(txt + j, stop - j);
            j = stop;
            if (u) { PUT(" ", 1); j += 3; }
        }
    }
#undef PUT
    if (total < cap) out[total] = '\0';
    return total <= cap ? (int64_t)total : -(int64_t)total;
}
