import { BlockList, isIP } from 'node:net';

/**
 * A set of networks, each a CIDR (`10.0.0.0/8`, `fd00::/8`) or one address, and the test of
 * an address against them (Node's own `BlockList`, IPv4 and IPv6).
 *
 * @example
 * const allowed = new Networks(['10.0.0.0/8']);
 * allowed.has('10.1.2.3'); // true
 * allowed.has('169.254.169.254'); // false
 * allowed.has('prefill-0'); // false: a name is no address
 *
 * @throws {TypeError} from the constructor, for an entry that is neither (its text in the message).
 */
export class Networks {
  readonly #list = new BlockList();

  constructor(entries: readonly string[]) {
    for (const entry of entries) {
      const [address = '', bits, extra] = entry.trim().split('/');
      const family = isIP(address);
      const prefix = bits === undefined ? undefined : Number(bits);
      const most = family === 6 ? 128 : 32;
      const badPrefix =
        prefix !== undefined && !(bits !== '' && Number.isInteger(prefix) && prefix >= 0 && prefix <= most);
      if (family === 0 || extra !== undefined || badPrefix) {
        throw new TypeError(`${JSON.stringify(entry)} is not an address or a CIDR such as 10.0.0.0/8 or fd00::/8`);
      }
      const type = family === 6 ? 'ipv6' : 'ipv4';
      if (prefix === undefined) this.#list.addAddress(address, type);
      else this.#list.addSubnet(address, prefix, type);
    }
  }

  /** Whether `address` (an IPv4 or IPv6 address; a host name never) is in one of the networks. */
  has(address: string): boolean {
    const family = isIP(address);
    return family !== 0 && this.#list.check(address, family === 6 ? 'ipv6' : 'ipv4');
  }
}
