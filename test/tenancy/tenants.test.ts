import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { parseTenants, TenantDirectory, TenantsFileError } from '../../src/tenancy/tenants.js';
import { recordingLogger } from '../support/async.js';
import { eventually } from '../support/http.js';

const FILE = `
tenants:
  - name: chat
    keys: [sk-chat-00000001]
    priority: 10
    requestsPerMinute: 600
    maxConcurrent: 32
  - name: batch
    keys: [sk-batch-0000001, sk-batch-0000002]
    tokensPerMinute: 100000
default:
  requestsPerMinute: 60
bands:
  - { priority: 10, queueTimeoutMs: 2000 }
`;

const directories: TenantDirectory[] = [];
afterEach(() => {
  for (const directory of directories.splice(0)) directory.close();
});

function fileWith(text: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'disagg-tenants-')), 'tenants.yaml');
  writeFileSync(path, text);
  return path;
}

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

describe('tenants', () => {
  it('a request is the tenant of its key; without one, the default tenant with its own limits', () => {
    const directory = new TenantDirectory({ file: fileWith(FILE) });
    directories.push(directory);
    expect(directory.tenantOf(bearer('sk-chat-00000001'))).toEqual({
      name: 'chat',
      priority: 10,
      requestsPerMinute: 600,
      tokensPerMinute: undefined,
      maxConcurrent: 32,
    });
    expect(directory.tenantOf(bearer('sk-batch-0000002')).name).toBe('batch');
    expect(directory.tenantOf({})).toMatchObject({ name: 'default', priority: 0, requestsPerMinute: 60 });
    expect(directory.tenantOf(bearer('sk-unknown'))).toMatchObject({ name: 'default' });
    expect(directory.isTenantKey('sk-batch-0000001')).toBe(true);
    expect(directory.isTenantKey('sk-unknown')).toBe(false);
    expect(directory.queueTimeoutMs(10)).toBe(2000);
    expect(directory.queueTimeoutMs(0)).toBeUndefined();
    expect(directory.tenants.map((tenant) => tenant.name)).toEqual(['chat', 'batch', 'default']);
  });

  it('a trusted gateway names the tenant in a header, but only with one of the keys allowed to', () => {
    const directory = new TenantDirectory({
      file: fileWith(FILE),
      header: 'X-Tenant',
      headerKeys: ['sk-gateway-00001'],
    });
    directories.push(directory);
    const gateway = { ...bearer('sk-gateway-00001'), 'x-tenant': 'chat' };
    expect(directory.tenantOf(gateway).name).toBe('chat');
    // A name the file does not know: a tenant of its own, with the default's limits.
    expect(directory.tenantOf({ ...gateway, 'x-tenant': 'team-7' })).toMatchObject({
      name: 'team-7',
      requestsPerMinute: 60,
    });
    expect(directory.tenantOf({ ...bearer('sk-someone-else'), 'x-tenant': 'chat' }).name).toBe('default');
    expect(directory.tenantOf({ 'x-tenant': 'chat' }).name).toBe('default');
  });

  it('refuses a file that does not check, naming the place and the problem', () => {
    expect(() => parseTenants('tenants: [{ name: a, keys: [short] }]', 't.yaml')).toThrow(
      /t\.yaml: tenant "a"\.keys\.0: Too small/,
    );
    expect(() => parseTenants('tenants: [{ name: a, rpm: 3 }]', 't.yaml')).toThrow(/Unrecognized key.*rpm/);
    expect(() => parseTenants('tenants: [{ name: a }, { name: a }]', 't.yaml')).toThrow('the tenant a is named twice');
    expect(() =>
      parseTenants('tenants: [{ name: a, keys: [sk-000000001] }, { name: b, keys: [sk-000000001] }]', 't.yaml'),
    ).toThrow("a key of b is also a's");
    expect(() => parseTenants('tenants: [{ name: default }]', 't.yaml')).toThrow(/default tenant's name/);
    expect(() => parseTenants('{ tenants: [', 't.json')).toThrow(TenantsFileError);
    expect(() => new TenantDirectory({ file: '/nonexistent/tenants.yaml' })).toThrow(/Cannot read the tenants file/);
  });

  it('names a tenant by its name, not its index, and suggests the key meant for a misspelt one', () => {
    expect(() =>
      parseTenants('tenants:\n  - { name: chat }\n  - { name: batch, requestPerMinute: 3 }\n', 't.yaml'),
    ).toThrow('t.yaml: tenant "batch": Unrecognized key: "requestPerMinute"; did you mean "requestsPerMinute"?');
    expect(() => parseTenants('tenants: [{ keys: [sk-000000001] }]', 't.yaml')).toThrow(/tenant 1 \(unnamed\)\.name/);
    expect(() => parseTenants('defualt: { maxConcurrent: 2 }', 't.yaml')).toThrow(/did you mean "default"\?/);
    expect(() => parseTenants('default: { maxConcurent: 2 }', 't.yaml')).toThrow(
      /default: .*did you mean "maxConcurrent"\?/,
    );
  });

  it("a tenant's service levels (slo) are its requests' defaults, the default tenant's too; a tenant without any has none", () => {
    const table = parseTenants(
      [
        'tenants:',
        '  - { name: chat, slo: { ttftMs: 500, itlMs: 25.5 } }',
        '  - { name: batch, slo: { itlMs: 200 } }',
        '  - { name: bulk }',
        '  - { name: empty, slo: {} }',
        'default: { slo: { ttftMs: 2000 } }',
      ].join('\n'),
      't.yaml',
    );
    expect(table.byName.get('chat')?.slo).toEqual({ ttftMs: 500, itlMs: 25.5 });
    expect(table.byName.get('batch')?.slo).toEqual({ itlMs: 200 });
    expect(table.byName.get('bulk')?.slo).toBeUndefined();
    expect(table.byName.get('empty')?.slo).toBeUndefined();
    expect(table.defaultTenant.slo).toEqual({ ttftMs: 2000 });
    // A tenant a trusted gateway names but the file does not has the default's.
    const directory = new TenantDirectory({ file: fileWith('default: { slo: { itlMs: 80 } }'), header: 'x-tenant' });
    directories.push(directory);
    expect(directory.tenantOf({ 'x-tenant': 'newcomer' }).slo).toEqual({ itlMs: 80 });
  });

  it('refuses a service level that is not a positive number of ms, and suggests the key meant for a misspelt one', () => {
    expect(() => parseTenants('tenants: [{ name: a, slo: { ttftMs: 0 } }]', 't.yaml')).toThrow(
      /tenant "a"\.slo\.ttftMs: Too small/,
    );
    expect(() => parseTenants('default: { slo: { itlMs: -5 } }', 't.yaml')).toThrow(/default\.slo\.itlMs: Too small/);
    expect(() => parseTenants("default: { slo: { itlMs: '100' } }", 't.yaml')).toThrow(/default\.slo\.itlMs/);
    expect(() => parseTenants('tenants: [{ name: a, slo: { tpotMs: 50 } }]', 't.yaml')).toThrow(
      't.yaml: tenant "a".slo: Unrecognized key: "tpotMs"; did you mean "ttftMs"?',
    );
    expect(() => parseTenants('default: { slo: { itlMS: 50 } }', 't.yaml')).toThrow(/did you mean "itlMs"\?/);
  });

  it('reads the file again when it changes; a change that does not check leaves the tenants as they were', async () => {
    const path = fileWith(FILE);
    const logger = recordingLogger();
    const directory = new TenantDirectory({ file: path, pollMs: 20, logger: logger.logger });
    directories.push(directory);
    // Written again until seen: a write in the same instant as the watch's first look at the
    // file would not be a change to it.
    const changed = `${FILE}\n  - { priority: 0, queueTimeoutMs: 500 }\n`.replace(
      'requestsPerMinute: 600',
      'requestsPerMinute: 5',
    );
    await eventually(() => {
      if (directory.tenantOf(bearer('sk-chat-00000001')).requestsPerMinute === 5) return true;
      writeFileSync(path, changed);
      return false;
    }, 'the change read');
    const broken = () => logger.records.some((record) => record.message?.includes('cannot be used') === true);
    await eventually(() => {
      if (broken()) return true;
      writeFileSync(path, 'tenants: [{ name: x, nonsense: true }]');
      return false;
    }, 'the bad change logged');
    expect(directory.tenantOf(bearer('sk-chat-00000001')).requestsPerMinute).toBe(5);
  });
});
