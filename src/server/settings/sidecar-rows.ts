// The decode-pod sidecar (`disagg sidecar`): a request's prefill worker named by its endpoint
// picker's header, checked against an allow-list, instead of chosen from a pool.
import { Networks } from '../../util/networks.js';
import { nonNegativeInteger, oneOf } from './parsers.js';
import { Invalid, inGroup } from './setting.js';

/** A comma-separated list of networks (CIDRs or addresses), or a list of them from a file. */
function networkList(value: unknown): string[] {
  const items = Array.isArray(value) ? value : String(value).split(',');
  const entries = items.map((item) => (typeof item === 'string' ? item.trim() : String(item))).filter((e) => e !== '');
  for (const entry of entries) {
    try {
      new Networks([entry]);
    } catch {
      throw new Invalid(
        `has ${JSON.stringify(entry)}, which is not an address or a CIDR such as 10.0.0.0/8 or fd00::/8`,
      );
    }
  }
  return entries;
}

/** The settings of `--help`'s Sidecar group. */
export const SIDECAR_ROWS = inGroup('Sidecar', [
  {
    key: 'sidecar.prefillFrom',
    flag: 'prefill-from',
    arg: 'pool|header',
    help: "where a request's prefill worker comes from: the prefill pool, or the x-prefiller-host-port header an endpoint picker set (header: a sidecar on a decode pod, as `disagg sidecar` runs; a request without it is served by the decode worker alone)",
    default: 'pool',
    parse: oneOf(['pool', 'header']),
  },
  {
    key: 'sidecar.prefillAllow',
    flag: 'prefill-allow',
    arg: 'CIDR[,CIDR]',
    help: 'with --prefill-from header: the networks a named prefill worker may be in (the prefill workers given or discovered are allowed too); any other is refused with a 403 before any call',
    default: [],
    shownDefault: 'none',
    parse: networkList,
  },
  {
    key: 'sidecar.prefillMaxRetries',
    flag: 'prefill-max-retries',
    arg: 'N',
    help: 'with --prefill-from header: retries of a request whose prefill leg failed before its first byte (a 5xx, a connection error), on the worker(s) the header named',
    default: 0,
    parse: nonNegativeInteger,
  },
]);
