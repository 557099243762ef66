/**
 * Text someone else chose (a user's name, a receiver's error answer) shown on one line of ours: a log line, a mail,
 * an admin page. One definition of what may not pass as it came: the C0 and C1 controls (line breaks, tabs, NUL,
 * U+0085 that ends a line for some log readers, U+009B that starts a terminal escape: review 63), the Unicode line
 * and paragraph separators, and the bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069),
 * which make what follows them read in another order than it is written. Joiners stay: Persian, Indic scripts and
 * emoji need them.
 */
const LINE_BREAKING = '\\p{Cc}\\p{Zl}\\p{Zp}\\u202a-\\u202e\\u2066-\\u2069';

const ANY_LINE_BREAKING = new RegExp(`[${LINE_BREAKING}]`, 'u');
const RUNS = new RegExp(`[${LINE_BREAKING}\\s]+`, 'gu');

/** Whether the text holds any of those characters (a field that must be one line refuses it). */
export function breaksLine(text: string): boolean {
  return ANY_LINE_BREAKING.test(text);
}

/** The text on one line: each run of those characters and white space becomes one space, and the ends are trimmed. */
export function oneLine(text: string): string {
  return text.replace(RUNS, ' ').trim();
}

/**
 * The double quotation marks, and what reads as one (Unicode's confusables of `"`: primes, gershayim, the ditto mark,
 * the double acute, fullwidth and ornamental quotes), that text of ours puts around text someone else chose: inside it
 * each becomes a single quote, and a run of apostrophe-like marks (`''`, `’’`, which read as `"`) one, so the text
 * cannot seem to close our quotes and go on as our own words (review 120: a name `Jane" <cfo@bigcorp.example> asked...`
 * put an unmarked address before the real one in a staff mail; review 121: the look-alikes did the same). One definition
 * for the mails (mailer.ts `quotedText`) and the built-in pages' scripts (their sources).
 */
export const DOUBLE_QUOTE_MARKS = /["\u02ba\u02dd\u02ee\u030b\u030e\u05f4\u201c-\u201f\u2033\u2036\u2e42\u275d-\u2760\u3003\u301d-\u301f\uff02]/g;
export const APOSTROPHE_RUNS = /['\u0060\u00b4\u02b9\u02bb\u02bc\u02bd\u2018-\u201b\u2032\u2035\uff07]{2,}/g;

/** The text with each of DOUBLE_QUOTE_MARKS made a single quote, and each run of APOSTROPHE_RUNS one. */
export function withoutDoubleQuotes(text: string): string {
  return text.replace(DOUBLE_QUOTE_MARKS, "'").replace(APOSTROPHE_RUNS, "'");
}
