// The import graph of src/ as written, for the layout rules of test/source-rules.test.ts.
import ts from 'typescript';

/**
 * How an import loads its module: `value` when it does as the importer loads (a binding used at
 * run time, `export *`, an import for its side effects), `type` when it is erased (`import
 * type`, `export type`, or every name marked `type`), `dynamic` for `import('…')`, which loads
 * it only when called.
 */
export type ImportKind = 'value' | 'type' | 'dynamic';

/** One relative import of a module: its target as a path from src/ (`server/health.ts`). */
export interface Import {
  to: string;
  kind: ImportKind;
}

/** A relative specifier (`../x.js`) of `file` (a path from src/) as a path from src/, `.js` read as its `.ts`. */
function resolve(file: string, specifier: string): string {
  return new URL(specifier, `file:///${file}`).pathname.slice(1).replace(/\.js$/, '.ts');
}

/** Whether every name of an import or export clause is marked `type` (none: it loads the module). */
function allTypes(elements: ts.NodeArray<ts.ImportSpecifier | ts.ExportSpecifier>): boolean {
  return elements.length > 0 && elements.every((element) => element.isTypeOnly);
}

/**
 * The relative imports of one module of src/ (`file` its path from src/), static and dynamic,
 * `export … from` among them; packages are left out.
 *
 * @example
 * importsOf('server/a.ts', "import type { B } from './b.js';\nexport * from '../c.js';");
 * // [{ to: 'server/b.ts', kind: 'type' }, { to: 'c.ts', kind: 'value' }]
 */
export function importsOf(file: string, text: string): Import[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const found: Import[] = [];
  const add = (specifier: ts.Expression | undefined, kind: ImportKind) => {
    if (specifier !== undefined && ts.isStringLiteralLike(specifier) && specifier.text.startsWith('.')) {
      found.push({ to: resolve(file, specifier.text), kind });
    }
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const bindings = clause?.namedBindings;
      const typeOnly =
        clause !== undefined &&
        (clause.isTypeOnly ||
          (clause.name === undefined &&
            bindings !== undefined &&
            ts.isNamedImports(bindings) &&
            allTypes(bindings.elements)));
      add(node.moduleSpecifier, typeOnly ? 'type' : 'value');
    } else if (ts.isExportDeclaration(node)) {
      const clause = node.exportClause;
      const typeOnly =
        node.isTypeOnly || (clause !== undefined && ts.isNamedExports(clause) && allTypes(clause.elements));
      add(node.moduleSpecifier, typeOnly ? 'type' : 'value');
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node.arguments[0], 'dynamic');
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      // `import('./x.js').X` in a type: erased like `import type`.
      add(node.argument.literal, 'type');
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/**
 * The cycles of a directed graph: one per group of nodes that reach each other (its strongly
 * connected component), shown as the shortest way from its first node (in sort order) round to
 * itself, `a -> b -> a`; a node that reaches itself directly is one too. None for a graph
 * without cycles.
 */
export function cyclesOf(edges: ReadonlyMap<string, ReadonlySet<string>>): string[] {
  const nodes = [...new Set([...edges.keys(), ...[...edges.values()].flatMap((targets) => [...targets])])].sort();
  // Tarjan's algorithm (recursive: src/ has a few hundred modules).
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  let next = 0;
  const connect = (node: string): void => {
    index.set(node, next);
    low.set(node, next);
    next++;
    stack.push(node);
    onStack.add(node);
    for (const target of edges.get(node) ?? []) {
      if (!index.has(target)) {
        connect(target);
        low.set(node, Math.min(low.get(node) as number, low.get(target) as number));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node) as number, index.get(target) as number));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop() as string;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1 || edges.get(node)?.has(node)) components.push(component.sort());
    }
  };
  for (const node of nodes) if (!index.has(node)) connect(node);
  return components
    .map((component) => {
      const start = component[0] as string;
      const members = new Set(component);
      // Breadth first from the start, inside the component, back to the start.
      const before = new Map<string, string>();
      const queue = [start];
      while (queue.length > 0) {
        const at = queue.shift() as string;
        for (const target of edges.get(at) ?? []) {
          if (!members.has(target)) continue;
          if (target === start) {
            const way = [at];
            while (way[0] !== start) way.unshift(before.get(way[0] as string) as string);
            return [...way, start].join(' -> ');
          }
          if (!before.has(target)) {
            before.set(target, at);
            queue.push(target);
          }
        }
      }
      return component.join(' -> ');
    })
    .sort();
}
