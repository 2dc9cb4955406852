/*
 * engine/tokenizer_pre.c: the BPE pre-tokenizers, llama.cpp's
 * LLAMA_VOCAB_PRE_TYPE_* (src/llama-vocab.cpp) and the tokenizer.ggml.pre
 * names that select them. Each is a list of regexes applied in turn, each
 * splitting the pieces the previous ones left (src/unicode.cpp,
 * unicode_regex_split); the regexes are the models' own, as llama.cpp
 * writes them. Those llama.cpp runs with a hand-written splitter run here
 * with one too (over the Unicode classes of tokenizer_unicode.c); the rest
 * go through PCRE2 on the text and regex llama.cpp gives std::regex
 * (Unicode categories collapsed to one code unit each, see collapse_regex).
 */
#include "tokenizer_int.h"

#include <stdlib.h>

#include "status.h"

static const char RX00[] = "[\\p{P}\\$\\+<=>\\^~\\|]+";
static const char RX_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
static const char RX01[] = "\\p{N}+";
static const char RX02[] = "[0-9][0-9][0-9]";
static const char RX_LLAMA3[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX03[] = "[\r\n]";
static const char RX04[] = "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";
static const char RX05[] = "\\s?[!-/:-~！-／：-～‘-‟　-。]+";
static const char RX06[] = "\\s+$";
static const char RX07[] = "[一-龥ࠀ-一가-퟿]+";
static const char RX08[] = "\\s?\\p{L}+";
static const char RX09[] = "\\s?\\p{P}+";
static const char RX10[] = "\\p{N}";
static const char RX11[] = "[\\p{P}\\$\\+<=>\\^~\\|`]+";
static const char RX_QWEN2[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX12[] = " ?[^(\\s|.,!?…。，、।۔،)]+";
static const char RX13[] = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX14[] = "<sentinel:[0-9]+>";
static const char RX15[] = "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z";
static const char RX16[] = "([\\t\\n]|    |  )";
static const char RX17[] = "[\\p{P}!-/:-@\\[-`{-~]";
static const char RX18[] = "\\p{N}{1,3}";
static const char RX19[] = "[一-龥぀-ゟ゠-ヿ]+";
static const char RX20[] = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
static const char RX21[] = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX22[] = "(?=(\\d{3})+(?!\\d))";
static const char RX23[] = "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char RX24[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_KIMI_K2[] = "\\p{Han}+";
static const char RX_AFMOE_DIGITS[] = "\\p{AFMoE_digits}";
static const char RX25[] = "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+";
static const char RX26[] = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX27[] = "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+";
static const char RX28[] = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX29[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+";
static const char RX_QWEN35[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX_TINY_AYA_DIGITS[] = "\\d{1,3}(?=(?:\\d{3})*\\b)";
static const char RX30[] = "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX31[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}";
static const char RX_NEWLINES[] = "[^\\n]+|[\\n]+";
static const char RX32[] = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char RX33[] = "\\S+";
static const char RX34[] = "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const pre_def pre_defs[] = {
    {"DEFAULT", true, {RX00, RX_GPT2, RX01, RX02}},
    {"LLAMA3", true, {RX_LLAMA3}},
    {"DEEPSEEK_LLM", true, {RX03, RX04, RX05, RX06, RX07, RX01}},
    {"DEEPSEEK_CODER", true, {RX03, RX08, RX09, RX07, RX10}},
    {"FALCON", true, {RX11, RX_GPT2, RX02}},
    {"MPT", true, {RX_GPT2}},
    {"STARCODER", true, {RX10, RX_GPT2}},
    {"GPT2", true, {RX_GPT2}},
    {"REFACT", true, {RX10, RX_GPT2}},
    {"COMMAND_R", true, {RX10, RX_GPT2}},
    {"STABLELM2", true, {RX_QWEN2}},
    {"QWEN2", true, {RX_QWEN2}},
    {"OLMO", true, {RX_GPT2}},
    {"DBRX", true, {RX_LLAMA3}},
    {"SMAUG", true, {RX_LLAMA3}},
    {"PORO", true, {RX12}},
    {"CHATGLM3", true, {RX00, RX_GPT2, RX01, RX02}},
    {"CHATGLM4", true, {RX_LLAMA3}},
    {"VIKING", true, {RX12, RX10}},
    {"JAIS", true, {RX_GPT2}},
    {"TEKKEN", true, {RX13}},
    {"SMOLLM", true, {RX10, RX_GPT2}},
    {"CODESHELL", true, {RX10, RX_GPT2}},
    {"BLOOM", true, {RX12}},
    {"GPT3_FINNISH", true, {RX12}},
    {"EXAONE", true, {RX10, RX_GPT2}},
    {"CHAMELEON", true, {RX14, RX15, RX16, RX10, RX17, RX_GPT2}},
    {"MINERVA", true, {RX10, RX_GPT2}},
    {"DEEPSEEK3_LLM", true, {RX18, RX19, RX20}},
    {"GPT4O", true, {RX21}},
    {"SUPERBPE", true, {RX01, RX22}},
    {"TRILLION", true, {RX_GPT2}},
    {"BAILINGMOE", true, {RX23}},
    {"LLAMA4", true, {RX00, RX_GPT2, RX01, RX02}},
    {"PIXTRAL", true, {RX00, RX_GPT2, RX01, RX02}},
    {"SEED_CODER", true, {RX24}},
    {"HUNYUAN", true, {RX_QWEN2}},
    {"KIMI_K2", true, {RX_KIMI_K2}},
    {"HUNYUAN_DENSE", true, {RX18, RX19, RX20}},
    {"GROK_2", true, {RX_QWEN2}},
    {"GRANITE_DOCLING", true, {RX_GPT2}},
    {"MINIMAX_M2", true, {RX21}},
    {"AFMOE", true, {RX_AFMOE_DIGITS, RX25, RX26}},
    {"SOLAR_OPEN", true, {RX_QWEN2}},
    {"YOUTU", true, {RX27, RX28}},
    {"EXAONE_MOE", true, {RX29}},
    {"QWEN35", true, {RX_QWEN35}},
    {"TINY_AYA", true, {RX_TINY_AYA_DIGITS, RX30}},
    {"JOYAI_LLM", true, {RX18, RX19, RX20}},
    {"JAIS2", true, {RX31}},
    {"GEMMA4", false, {RX_NEWLINES}},
    {"SARVAM_MOE", false, {RX_NEWLINES}},
    {"MINICPM5", true, {RX18, RX32}},
    {"WHITESPACE", false, {RX33}},
    {"GRANITE_EMB_MULTI", true, {RX34}},
    {"MELLUM2", true, {RX10, RX_GPT2}},
    {"LAGUNA", true, {RX_NEWLINES, RX_QWEN2}},
};

static const pre_name pre_names[] = {
    {"default", "DEFAULT", 0},
    {"minicpm5", "MINICPM5", PF_IGNORE_MERGES},
    {"llama3", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-v3", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-bpe", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon3", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon-h1", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"pixtral", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"midm-2.0", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"lfm2", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"jina-v5-nano", "LLAMA3", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"deepseek-llm", "DEEPSEEK_LLM", 0},
    {"deepseek-coder", "DEEPSEEK_CODER", 0},
    {"deepseek-v3", "DEEPSEEK3_LLM", 0},
    {"youtu", "YOUTU", PF_IGNORE_MERGES},
    {"falcon", "FALCON", 0},
    {"mpt", "MPT", 0},
    {"starcoder", "STARCODER", 0},
    {"gpt-2", "GPT2", 0},
    {"phi-2", "GPT2", 0},
    {"jina-es", "GPT2", 0},
    {"jina-de", "GPT2", 0},
    {"gigachat", "GPT2", 0},
    {"jina-v2-es", "GPT2", 0},
    {"jina-v2-de", "GPT2", 0},
    {"a.x-4.0", "GPT2", 0},
    {"mellum", "GPT2", 0},
    {"modern-bert", "GPT2", 0},
    {"jais-2", "JAIS2", 0},
    {"gemma4", "GEMMA4", PF_ESCAPE_WS},
    {"granite-embed-multi-311m", "GEMMA4", PF_ESCAPE_WS},
    {"sarvam-moe", "SARVAM_MOE", PF_ESCAPE_WS},
    {"jina-v1-en", "GPT2", 0},
    {"jina-v2-code", "GPT2", 0},
    {"roberta-bpe", "GPT2", 0},
    /* goes with tokenizer.ggml.model "whitespace" (jina-embeddings-v2-base-zh), which drops the spaces
     * first; with "gpt2" llama.cpp aborts on any space (a merge part with a space), so it is refused */
    {"whitespace", "WHITESPACE", PF_UNSUPPORTED},
    {"refact", "REFACT", 0},
    {"command-r", "COMMAND_R", 0},
    {"qwen2", "QWEN2", 0},
    {"deepseek-r1-qwen", "QWEN2", 0},
    {"kormo", "QWEN2", 0},
    {"f2llmv2", "QWEN2", 0},
    {"qwen35", "QWEN35", 0},
    {"stablelm2", "STABLELM2", 0},
    {"olmo", "OLMO", 0},
    {"dbrx", "DBRX", 0},
    {"smaug-bpe", "SMAUG", 0},
    {"poro-chat", "PORO", 0},
    {"glm4", "CHATGLM4", PF_NO_BOS},
    {"chatglm-bpe", "CHATGLM4", PF_NO_BOS},
    {"viking", "VIKING", 0},
    {"jais", "JAIS", 0},
    {"tekken", "TEKKEN", PF_IGNORE_MERGES | PF_ADD_BOS},
    {"smollm", "SMOLLM", 0},
    {"codeshell", "CODESHELL", 0},
    {"bloom", "BLOOM", 0},
    {"gpt3-finnish", "GPT3_FINNISH", 0},
    {"exaone", "EXAONE", 0},
    {"exaone4", "GPT2", 0},
    {"exaone-moe", "EXAONE_MOE", 0},
    {"chameleon", "CHAMELEON", PF_ADD_BOS},
    {"minerva-7b", "MINERVA", 0},
    {"megrez", "QWEN2", 0},
    {"gpt-4o", "GPT4O", 0},
    {"llama4", "GPT4O", 0},
    {"kanana2", "GPT4O", 0},
    {"talkie", "GPT4O", 0},
    {"granite-embed-multi-97m", "GRANITE_EMB_MULTI", PF_IGNORE_MERGES},
    {"tiny_aya", "TINY_AYA", 0},
    {"cohere2moe", "TINY_AYA", 0},
    {"superbpe", "SUPERBPE", 0},
    {"trillion", "TRILLION", 0},
    {"granite-docling", "GRANITE_DOCLING", 0},
    {"bailingmoe", "BAILINGMOE", 0},
    {"bailingmoe2", "BAILINGMOE", 0},
    {"llada-moe", "BAILINGMOE", 0},
    {"seed-coder", "SEED_CODER", 0},
    {"hunyuan", "HUNYUAN", 0},
    {"hunyuan-dense", "HUNYUAN_DENSE", 0},
    {"joyai-llm", "JOYAI_LLM", 0},
    {"kimi-k2", "KIMI_K2", 0},
    {"grok-2", "GROK_2", 0},
    {"afmoe", "AFMOE", 0},
    {"laguna", "LAGUNA", 0},
    {"minimax-m2", "MINIMAX_M2", 0},
    {"solar-open", "SOLAR_OPEN", 0},
    {"mellum2", "MELLUM2", 0},
};

#define N_PRE_NAMES ((int)(sizeof pre_names / sizeof pre_names[0]))
#define N_PRE_DEFS  ((int)(sizeof pre_defs / sizeof pre_defs[0]))

const pre_def *eng_tok_pre_def(const char *type) {
    for (int i = 0; i < N_PRE_DEFS; i++)
        if (!strcmp(pre_defs[i].type, type)) return &pre_defs[i];
    return NULL;
}

const pre_name *eng_tok_pre_name(const char *s, size_t n) {
    for (int i = 0; i < N_PRE_NAMES; i++)
        if (strlen(pre_names[i].name) == n && !memcmp(pre_names[i].name, s, n)) return &pre_names[i];
    return NULL;
}

/* llama.cpp's unicode_regex_split_custom: the regexes it splits by hand. */
static int custom_kind(const char *rx, uint8_t *digits) {
    *digits = 0;
    if (rx == RX_GPT2) return K_GPT2;
    if (rx == RX_LLAMA3) { *digits = 3; return K_LLAMA3; }
    if (rx == RX_QWEN2) { *digits = 1; return K_LLAMA3; }
    if (rx == RX_QWEN35) return K_QWEN35;
    if (rx == RX_KIMI_K2) return K_KIMI_K2;
    if (rx == RX_AFMOE_DIGITS || rx == RX_TINY_AYA_DIGITS) return K_AFMOE_DIGITS;
    if (rx == RX_NEWLINES) return K_NEWLINES;
    /* superbpe's (?=(\d{3})+(?!\d)): llama.cpp runs it through std::regex, where each
     * position scans the digit run ahead (quadratic on long runs); split_digits3
     * gives the same cuts in one pass */
    if (!strcmp(rx, "(?=(\\d{3})+(?!\\d))")) return K_DIGITS3_FROM_RIGHT;
    return K_REGEX;
}

/* The regex llama.cpp hands to std::regex when rx uses a Unicode category
 * (unicode_regex_split): each \p{..} becomes a bracket of one stand-in code
 * unit (the text's non-ASCII code points of that category become it, see
 * collapse_cp) plus the category's ASCII members; other characters are kept.
 * \p{Lu} and the other letter subcategories all mean \p{L}, and \p{S}'s ASCII
 * members leave '~' out, exactly as there. Returns the unit count. */
static size_t collapse_regex(const char *rx, uint32_t *out) {
    static const struct { const char *pat; uint32_t unit; const char *ascii; } cats[] = {
        {"\\p{N}", 0xD1, "0-9"},
        {"\\p{L}", 0xD2, "A-Za-z"},   {"\\p{Lu}", 0xD2, "A-Za-z"}, {"\\p{Ll}", 0xD2, "A-Za-z"},
        {"\\p{Lt}", 0xD2, "A-Za-z"},  {"\\p{Lm}", 0xD2, "A-Za-z"}, {"\\p{Lo}", 0xD2, "A-Za-z"},
        {"\\p{P}", 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
        {"\\p{M}", 0xD4, ""},
        {"\\p{S}", 0xD5, "\\$\\+<->^`\\|"},
    };
    size_t n = 0, len = strlen(rx);
    bool inside = false;
    for (size_t i = 0; i < len; i++) {
        if (rx[i] == '[' && (i == 0 || rx[i - 1] != '\\')) { out[n++] = '['; inside = true; continue; }
        if (inside && rx[i] == ']' && rx[i - 1] != '\\') { out[n++] = ']'; inside = false; continue; }
        if (rx[i] == '\\' && i + 3 < len && rx[i + 1] == 'p' && rx[i + 2] == '{') {
            const char *close = strchr(rx + i + 3, '}');
            bool done = false;
            for (size_t k = 0; close && close <= rx + i + 10 && k < sizeof cats / sizeof cats[0]; k++) {
                size_t pl = (size_t)(close - (rx + i)) + 1;
                if (strlen(cats[k].pat) != pl || memcmp(cats[k].pat, rx + i, pl)) continue;
                if (!inside) out[n++] = '[';
                out[n++] = cats[k].unit;
                for (const char *a = cats[k].ascii; *a; a++) out[n++] = (uint8_t)*a;
                if (!inside) out[n++] = ']';
                i += pl - 1;
                done = true;
                break;
            }
            if (done) continue;
        }
        out[n++] = (uint8_t)rx[i];
    }
    return n;
}

static bool uses_category(const char *rx) {
    static const char *cats[] = {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}", "\\p{Lu}", "\\p{Ll}", "\\p{Lt}",
                                 "\\p{Lm}", "\\p{Lo}"};
    for (size_t k = 0; k < sizeof cats / sizeof cats[0]; k++)
        if (strstr(rx, cats[k])) return true;
    return false;
}

/* The collapsed code unit of a code point (unicode_regex_split's text_collapsed). */
static inline uint32_t collapse_cp(uint32_t c, uint8_t cls) {
    static const uint32_t unit[] = {0xD0, 0xD2, 0xD1, 0x0B, 0xD4, 0xD3, 0xD5, 0xD0, 0xD0, 0xD0};
    return c < 128 ? c : unit[cls];
}

/* The code unit std::wregex sees (non-ASCII whitespace becomes U+000B). */
static inline uint32_t wide_cp(uint32_t c, uint8_t cls) { return c >= 0x80 && cls == UC_W ? 0x0B : c; }

int eng_tok_pre_compile(eng_tokenizer *t, const char *path, char *err, size_t errlen) {
    for (int k = 0; k < MAX_STEPS && t->pre->rx[k]; k++) {
        const char *rx = t->pre->rx[k];
        split_step *st = &t->steps[t->n_steps++];
        st->kind = (uint8_t)custom_kind(rx, &st->digits);
        if (st->kind != K_REGEX) continue;
        size_t n = 0, len = strlen(rx), l;
        uint32_t *pat = malloc((8 * len + 16) * sizeof *pat);   /* a 5-byte \p{..} becomes at most 29 units */
        if (!pat) return ENG_ERR_NOMEM;
        st->collapsed = uses_category(rx);
        if (st->collapsed) n = collapse_regex(rx, pat);
        else
            for (size_t i = 0; i < len; i += l) pat[n++] = utf8_decode((const uint8_t *)rx, len, i, &l);
        int ec;
        PCRE2_SIZE eo;
        st->re = pcre2_compile((PCRE2_SPTR)pat, n, PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        free(pat);
        if (!st->re) {   /* the regexes are ours: a failure here is a bug, but say which */
            eng_errf(err, errlen, "%s: pre-tokenizer %s: regex %d does not compile (PCRE2 error %d at %zu)", path,
                     t->pre->type, k, ec, (size_t)eo);
            return ENG_ERR_UNSUPPORTED;
        }
        pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE);   /* without JIT, pcre2_match interprets */
    }
    return ENG_OK;
}

const char *eng_tokenizer_pre_name_at(int i, const char **type, bool *supported) {
    if (i < 0 || i >= N_PRE_NAMES) return NULL;
    if (type) *type = pre_names[i].type;
    if (supported) *supported = !(pre_names[i].flags & PF_UNSUPPORTED);
    return pre_names[i].name;
}

const char *eng_tokenizer_pre_type_at(int i, const char *const **rx, unsigned *hand) {
    if (i < 0 || i >= N_PRE_DEFS) return NULL;
    if (rx) *rx = pre_defs[i].rx;
    if (hand) {
        *hand = 0;
        uint8_t d;
        for (int k = 0; k < MAX_STEPS && pre_defs[i].rx[k]; k++)
            if (custom_kind(pre_defs[i].rx[k], &d) != K_REGEX) *hand |= 1u << k;
    }
    return pre_defs[i].type;
}

// ----------------------------------------------------------------------------
// The hand-written splitters: llama.cpp's versions of those regexes, over code
// points cp[0..n) with classes cls[0..n). Each writes the end index of every
// piece into ends[] and returns the piece count (pieces tile [0, n)).

#define CLS(p) ((p) < n ? cls[p] : UC_NONE)
#define CPT(p) ((p) < n ? cp[p] : 0xFFFFFFFFu)
#define ADD(e) do { if ((e) > prev) { ends[nw++] = (int32_t)(e); prev = (e); } } while (0)
#define IS_OTHER(c) ((c) >= UC_M)   /* [^\s\p{L}\p{N}], and not past the end */

static inline uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d (case-insensitive when `fold`: no other code point
 * lowercases to one of these letters): the length matched at pos, or 0. */
static size_t contraction(const uint32_t *cp, size_t n, size_t pos, bool fold) {
    if (pos >= n || cp[pos] != '\'' || pos + 1 >= n) return 0;
    uint32_t c1 = fold ? ascii_lower(cp[pos + 1]) : cp[pos + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= n) return 0;
    uint32_t c2 = fold ? ascii_lower(cp[pos + 2]) : cp[pos + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

/* The whitespace tail shared by the llama3-style splitters: \s*[\r\n]+ (when
 * `rn`) | \s+(?!\S) | \s+ | one code point. Returns the new position. */
static inline size_t ws_tail(const uint32_t *cp, const uint8_t *cls, size_t n, size_t pos, bool rn) {
    size_t w = 0, last_rn = 0;
    while (CLS(pos + w) == UC_W) {
        if (rn && (cp[pos + w] == '\r' || cp[pos + w] == '\n')) last_rn = pos + w + 1;
        w++;
    }
    if (last_rn > 0) return last_rn;                 /* \s*[\r\n]+ */
    if (w > 1 && pos + w < n) return pos + w - 1;    /* \s+(?!\S) */
    if (w > 0) return pos + w;                       /* \s+ */
    return pos + 1;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t split_gpt2(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        size_t k = contraction(cp, n, pos, false);
        if (k) { pos += k; ADD(pos); continue; }
        uint8_t c2 = cp[pos] == ' ' ? CLS(pos + 1) : cls[pos];
        if (c2 == UC_L || c2 == UC_N) {   /* ' ?' then a run of one class */
            pos += cp[pos] == ' ';
            while (CLS(pos) == c2) pos++;
            ADD(pos);
            continue;
        }
        if (IS_OTHER(c2)) {
            pos += cp[pos] == ' ';
            while (IS_OTHER(CLS(pos))) pos++;
            ADD(pos);
            continue;
        }
        pos = ws_tail(cp, cls, n, pos, false);
        ADD(pos);
    }
    return nw;
}

/* Llama 3 (digits 3): (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   and Qwen 2 (digits 1: \p{N});
 * Qwen 3.5 (marks): letters runs also take \p{M}, which leaves the third class. */
static size_t split_llama3(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends, size_t max_digits,
                           bool marks) {
    size_t nw = 0, prev = 0, pos = 0;
#define WORDCH(c) ((c) == UC_L || (marks && (c) == UC_M))
    while (pos < n) {
        uint32_t c = cp[pos];
        uint8_t f = cls[pos];
        size_t k = contraction(cp, n, pos, true);
        if (k) { pos += k; ADD(pos); continue; }
        if (!(c == '\r' || c == '\n' || f == UC_N) && (WORDCH(f) || WORDCH(CLS(pos + 1)))) {
            pos++;
            while (WORDCH(CLS(pos))) pos++;
            ADD(pos);
            continue;
        }
        if (f == UC_N) {
            size_t ini = pos;
            while (CLS(pos) == UC_N) {
                if (++pos - ini >= max_digits) { ADD(pos); ini = pos; }
            }
            ADD(pos);
            continue;
        }
        uint8_t f2 = c == ' ' ? CLS(pos + 1) : f;
        if (IS_OTHER(f2) && !(marks && f2 == UC_M)) {
            pos += c == ' ';
            while (IS_OTHER(CLS(pos)) && !(marks && CLS(pos) == UC_M)) pos++;
            while (CPT(pos) == '\r' || CPT(pos) == '\n') pos++;
            ADD(pos);
            continue;
        }
        pos = ws_tail(cp, cls, n, pos, true);
        ADD(pos);
    }
#undef WORDCH
    return nw;
}

/* Han ideographs as llama.cpp's unicode_cpt_is_han sees them. */
static inline bool is_han(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0x2CEB0 && c <= 0x2EBEF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Kimi K2: [\p{Han}]+ | letter words without Han (an optional leading
 * [^\r\n\p{L}\p{N}], then an optional contraction) | \p{N}{1,3} |
 *  ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+   (llama.cpp's version). */
static size_t split_kimi_k2(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    size_t nw = 0, prev = 0, pos = 0;
#define LNH(p) (CLS(p) == UC_L && !is_han(CPT(p)))
    while (pos < n) {
        uint32_t c = cp[pos];
        uint8_t f = cls[pos];
        if (is_han(c)) {
            while (pos < n && is_han(cp[pos])) pos++;
            ADD(pos);
            continue;
        }
        bool lead_ok = !(c == '\r' || c == '\n' || f == UC_L || f == UC_N);
        if (LNH(pos) || (lead_ok && LNH(pos + 1))) {
            if (lead_ok) pos++;
            while (LNH(pos)) pos++;
            if (CPT(pos) == '\'' && pos + 1 < n) {
                uint32_t c1 = ascii_lower(cp[pos + 1]);
                if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
                    pos += 2;
                } else if (pos + 2 < n) {
                    uint32_t c2 = ascii_lower(cp[pos + 2]);
                    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) pos += 3;
                }
            }
            ADD(pos);
            continue;
        }
        if (f == UC_N) {
            size_t ini = pos;
            while (CLS(pos) == UC_N) {
                if (++pos - ini >= 3) { ADD(pos); ini = pos; }
            }
            ADD(pos);
            continue;
        }
        uint8_t f2 = c == ' ' ? CLS(pos + 1) : f;
        if (IS_OTHER(f2)) {
            pos += c == ' ';
            while (IS_OTHER(CLS(pos))) pos++;
            while (CPT(pos) == '\r' || CPT(pos) == '\n') pos++;
            ADD(pos);
            continue;
        }
        pos = ws_tail(cp, cls, n, pos, true);
        ADD(pos);
    }
#undef LNH
    return nw;
}

/* AFMoE (and tiny_aya) digits: a run of \p{N} splits as its length mod 3
 * leading digits, then threes. As in llama.cpp, the text before a run is not
 * a piece of its own: it goes with the run's first group. */
static size_t split_afmoe_digits(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    (void)cp;
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        if (cls[pos] != UC_N) { pos++; continue; }
        size_t a = pos;
        while (pos < n && cls[pos] == UC_N) pos++;
        size_t cur = a + (pos - a) % 3;
        if (cur > a) ADD(cur);
        for (; cur < pos; cur += 3) ADD(cur + 3);
    }
    ADD(n);
    return nw;
}

/* (?=(\d{3})+(?!\d)) as std::regex_iterator uses it: an empty match (a cut)
 * wherever an ASCII digit run reaching to its end has a length that is a
 * multiple of 3 (\d is ASCII only there, as here). */
static size_t split_digits3(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    (void)cls;
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        if (cp[pos] < '0' || cp[pos] > '9') { pos++; continue; }
        size_t a = pos;
        while (pos < n && cp[pos] >= '0' && cp[pos] <= '9') pos++;
        for (size_t c = a + (pos - a) % 3; c + 3 <= pos; c += 3) ADD(c);
    }
    ADD(n);
    return nw;
}

/* [^\n]+|[\n]+ */
static size_t split_newlines(const uint32_t *cp, const uint8_t *cls, size_t n, int32_t *ends) {
    (void)cls;
    size_t nw = 0, prev = 0, pos = 0;
    while (pos < n) {
        bool nl = cp[pos] == '\n';
        while (pos < n && (cp[pos] == '\n') == nl) pos++;
        ADD(pos);
    }
    return nw;
}

#undef CLS
#undef CPT
#undef ADD
#undef IS_OTHER

/* The pieces one K_REGEX step makes of units sub[0..n): llama.cpp's
 * std::regex_iterator loop (unmatched stretches are pieces too; after an
 * empty match, a non-empty one is tried at the same place, else the search
 * moves on by one), run with PCRE2. false when PCRE2 fails. */
static bool split_regex(tok_split *s, const split_step *st, const uint32_t *sub, size_t n, int32_t *ends,
                        size_t *count) {
    if (!s->md) {
        s->md = pcre2_match_data_create(1, NULL);
        s->mc = pcre2_match_context_create(NULL);
        s->jit = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, NULL);
        if (!s->md || !s->mc || !s->jit) return false;
        pcre2_jit_stack_assign(s->mc, NULL, s->jit);
    }
    size_t nw = 0, prev = 0, pos = 0;
    uint32_t opts = 0;
#define ADD(e) do { if ((e) > prev) { ends[nw++] = (int32_t)(e); prev = (e); } } while (0)
    while (pos <= n) {
        int rc = pcre2_match(st->re, (PCRE2_SPTR)sub, n, pos, opts, s->md, s->mc);
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (!opts) break;
            opts = 0;
            pos++;
            continue;
        }
        if (rc < 0) return false;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        ADD(ms);
        ADD(me);
        if (me == ms) {
            if (ms == n) break;
            opts = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
        } else {
            opts = 0;
        }
        pos = me;
    }
    ADD(n);
#undef ADD
    *count = nw;
    return true;
}

bool eng_tok_split_reserve(tok_split *s, size_t nc) {
    if (nc <= s->cap) return true;
    size_t c = nc > 2 * s->cap ? nc : 2 * s->cap;
    int32_t *e = realloc(s->ends, c * sizeof *e);
    if (!e) return false;
    s->ends = e;
    int32_t *e2 = realloc(s->ends2, c * sizeof *e2);
    if (!e2) return false;
    s->ends2 = e2;
    s->cap = c;
    return true;
}

void eng_tok_split_free(tok_split *s) {
    free(s->ends);
    free(s->ends2);
    free(s->sub);
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mc);
    pcre2_jit_stack_free(s->jit);
}

const int32_t *eng_tok_pre_split(const eng_tokenizer *t, tok_split *s, const uint32_t *cps, const uint8_t *cls,
                                 size_t nc, size_t *np) {
    int32_t *cur = s->ends, *nxt = s->ends2;
    size_t n_cur = 1;
    cur[0] = (int32_t)nc;
    for (int k = 0; k < t->n_steps; k++) {
        const split_step *st = &t->steps[k];
        size_t n_nxt = 0, a = 0;
        for (size_t w = 0; w < n_cur; w++) {
            size_t b = (size_t)cur[w], m = 0;
            const uint32_t *cp = cps + a;
            const uint8_t *cl = cls + a;
            int32_t *out = nxt + n_nxt;
            switch (st->kind) {
            case K_GPT2:         m = split_gpt2(cp, cl, b - a, out); break;
            case K_LLAMA3:       m = split_llama3(cp, cl, b - a, out, st->digits, false); break;
            case K_QWEN35:       m = split_llama3(cp, cl, b - a, out, 1, true); break;
            case K_KIMI_K2:      m = split_kimi_k2(cp, cl, b - a, out); break;
            case K_AFMOE_DIGITS: m = split_afmoe_digits(cp, cl, b - a, out); break;
            case K_NEWLINES:     m = split_newlines(cp, cl, b - a, out); break;
            case K_DIGITS3_FROM_RIGHT: m = split_digits3(cp, cl, b - a, out); break;
            default:   /* the piece's code units as the regex sees them */
                if (b - a > s->sub_cap) {
                    const size_t c = b - a > 2 * s->sub_cap ? b - a : 2 * s->sub_cap;
                    uint32_t *u = realloc(s->sub, c * sizeof *u);
                    if (!u) return NULL;
                    s->sub = u;
                    s->sub_cap = c;
                }
                for (size_t i = a; i < b; i++)
                    s->sub[i - a] = st->collapsed ? collapse_cp(cps[i], cls[i]) : wide_cp(cps[i], cls[i]);
                if (!split_regex(s, st, s->sub, b - a, out, &m)) return NULL;
            }
            for (size_t j = 0; j < m; j++) out[j] += (int32_t)a;
            n_nxt += m;
            a = b;
        }
        int32_t *tmp = cur;
        cur = nxt;
        nxt = tmp;
        n_cur = n_nxt;
    }
    *np = n_cur;
    return cur;
}
