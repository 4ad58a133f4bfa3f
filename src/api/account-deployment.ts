// What an account (and optionally one of its zones) has deployed, gathered
// from the store for export: the latest network_transit entrypoints, the
// managed rulesets their execute rules run (with expressions), and the
// contents of every list they name, in one consistent read. `moat export`
// writes it as the files `moat replay` and `moat daemon` read.

import { MoatError } from '../errors/index.js';
import { MANAGED_LISTS } from '../expr/index.js';
import type { Store } from '../store/index.js';
import { DEFAULT_API_LIMITS } from './limits.js';
import { listsOfExpression as listsOf, RulesetService, type RulesetView } from './rulesets-service.js';

/** What an account (and zone) deploys: entrypoints, executed managed rulesets, named lists. */
export interface AccountDeployment {
  /** The account's network_transit entrypoint (absent when it has none). */
  account?: RulesetView | undefined;
  /** The zone's network_transit entrypoint, when a zone was asked for and has one. */
  zone?: RulesetView | undefined;
  /** Managed rulesets executed by the entrypoints, at the versions they deploy (operator view, with expressions). */
  managed: RulesetView[];
  /** List contents by canonical name (`office_blocklist`, `svc.malware`): addresses, CIDRs and `a..b` ranges. */
  lists: Record<string, string[]>;
}

/**
 * Reads the deployment of an account (and zone) in one read transaction.
 * `listMemo`: list contents read before, by ListStore.contentKey (the hub's: a
 * 100k-entry list is read from the database once per change, not on every rule change).
 */
export async function readAccountDeployment(store: Store, accountId: string, zoneId?: string, listMemo?: Map<string, string[]>): Promise<AccountDeployment> {
  const service = new RulesetService(store, DEFAULT_API_LIMITS);
  return store.read(async (tx) => {
    const { rulesets, lists } = tx;
    if (zoneId !== undefined) {
      if ((await tx.users.zoneAccount(zoneId)) !== accountId) throw new MoatError('USER_BAD_INPUT', `zone ${zoneId} is not a zone of account ${accountId}`);
    }
    const entry = async (zone: string | null) => {
      const row = await rulesets.entrypoint({ accountId, zoneId: zone }, 'network_transit');
      return row === undefined ? undefined : service.view(tx, row, row.latest_version, true, true);
    };
    const account = await entry(null);
    const zone = zoneId === undefined ? undefined : await entry(zoneId);
    const managed: RulesetView[] = [];
    const names = new Set<string>();
    for (const rs of [account, zone]) {
      for (const r of rs?.rules ?? []) {
        for (const n of listsOf(r.expression)) names.add(n);
        if (r.action !== 'execute' || r.enabled === false) continue;
        const id = r.action_parameters?.['id'] as string;
        const pinned = r.action_parameters?.['version'];
        const row = await rulesets.get(id);
        if (row === undefined) continue;
        const v = typeof pinned === 'string' && /^\d+$/.test(pinned) ? Number(pinned) : row.latest_version;
        if (!managed.some((x) => x.id === id)) managed.push(await service.view(tx, row, v, true, true));
      }
    }
    for (const m of managed) for (const r of m.rules ?? []) for (const n of listsOf(r.expression)) names.add(n);
    const out: Record<string, string[]> = {};
    for (const name of [...names].sort()) {
      const read = () => (MANAGED_LISTS.includes(name) ? lists.managedEntries(name) : lists.entries(accountId, name));
      const key = listMemo === undefined ? undefined : await lists.contentKey(accountId, name);
      let entries = key === undefined ? undefined : listMemo!.get(key);
      if (entries === undefined) {
        entries = await read();
        if (key !== undefined) {
          // A list's earlier contents are of no more use: one entry per list.
          const list = key.slice(0, key.lastIndexOf(':') + 1);
          for (const k of listMemo!.keys()) if (k.startsWith(list)) listMemo!.delete(k);
          listMemo!.set(key, entries);
        }
      }
      out[name] = entries;
    }
    return { account, zone, managed, lists: out };
  });
}
