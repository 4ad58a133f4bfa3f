// Rules that read data the bundle was not given: a country or AS number with no
// GeoIP database, a managed list ($svc.*) with no file. Such a rule compiles
// (the value is simply empty) but silently never matches as its author meant,
// so the loader names each one: a warning by default, an error on request.

import { MoatError } from '../errors/index.js';
import { canonicalListName } from '../expr/index.js';
import type { Evaluator } from './evaluator.js';

/** What to do with a rule that reads data the bundle was not given. */
export type MissingDataPolicy = 'warn' | 'error';

/** The data a bundle was given. */
export interface GivenData {
  readonly country: boolean;
  readonly asn: boolean;
  /** Canonical names of the lists given. */
  readonly lists: readonly string[];
}

/** One MISSING_DATA (5011) error per enabled rule that reads data not given, naming the rule and what is missing. */
export function missingData(ev: Evaluator, given: GivenData): MoatError[] {
  const out: MoatError[] = [];
  for (const r of ev.rules) {
    if (!r.rule.enabled) continue;
    const needs: string[] = [];
    const fields = [...new Set(r.fields.map((f) => f.replace(/\.key$/, '')))];
    const country = fields.filter((f) => f.endsWith('.country'));
    const asn = fields.filter((f) => f.endsWith('.asnum'));
    if (country.length > 0 && !given.country) needs.push(`${country.join(', ')} but no GeoIP country database is given (geoip.country; replay: --geoip)`);
    if (asn.length > 0 && !given.asn) needs.push(`${asn.join(', ')} but no GeoIP ASN database is given (geoip.asn; replay: --asn)`);
    const lists = [...new Set(r.lists.map((l) => canonicalListName(l)))].filter((l) => !given.lists.includes(l));
    if (lists.length > 0) needs.push(`${lists.map((l) => '$' + l).join(', ')} but ${lists.length === 1 ? 'that list is' : 'those lists are'} not given (lists; replay: --list NAME=FILE)`);
    if (needs.length === 0) continue;
    const id = [r.rule.id, r.rule.description?.trim() ? `"${r.rule.description.trim()}"` : undefined].filter(Boolean).join(' ');
    const where = `${r.level} ruleset, rule ${r.index}${id ? ` (${id})` : ''}${r.from ? ` of managed ruleset ${r.from.managedId}` : ''}`;
    out.push(new MoatError('MISSING_DATA', `${where}: reads ${needs.join('; and ')}: the rule never matches as written`));
  }
  return out;
}
