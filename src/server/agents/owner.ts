import { createHash } from 'node:crypto';
import { clientKey, DEFAULT_TENANT } from '../../tenancy/tenants.js';
import type { RequestHeaders } from '../pipeline/exchange.js';
import type { ProxyState } from '../pipeline/proxy-state.js';

/**
 * Whose a stored response or conversation is: the request's tenant when it has one of its own
 * (a tenant's key, or a tenant named by a trusted gateway's header); else, for the default
 * tenant, its API key (a digest, never the key), so that two clients of a router without
 * tenants do not read each other's; else everyone without a key shares the default tenant.
 *
 * @internal
 */
export function ownerOf(proxy: Pick<ProxyState, 'tenants'>, headers: RequestHeaders): string {
  const tenant = proxy.tenants.tenantOf(headers).name;
  if (tenant !== DEFAULT_TENANT) return `tenant:${tenant}`;
  const key = clientKey(headers);
  if (key === undefined) return `tenant:${tenant}`;
  return `key:${createHash('sha256').update(key).digest('hex').slice(0, 32)}`;
}
