//! The layers drawn in docs/architecture.md ("Layers") and the 70-line rule, checked on the
//! source read as code (syn): a stage never imports another stage; a store adapter never
//! imports a stage; `config` is a leaf (#43); an adapter is named only at the edges (#56); no
//! production function is longer than 70 lines. Test code — `#[cfg(test)]` items wherever they
//! stand, the files of `#[cfg(test)] mod x;`, `tests.rs` files and the conformance suites — is
//! left out. Before #65 the check read each file as text up to its first `#[cfg(test)]`, so
//! about 1 800 production lines below an early one escaped it, and an adapter reached through
//! `use crate::store;` then `store::pg::Pg` passed; each rule is proven below by a planted
//! violation of that shape.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The stages: each a room of its own.
const STAGES: [&str; 6] = ["ingress", "pump", "dispatch", "backfill", "jobs", "consistency"];
/// What `config` may import: nothing that acts on it.
const CONFIG_MAY_USE: [&str; 3] = ["config", "clock", "secret"];
/// The store adapters: concrete servers' and the in-memory twins'.
const ADAPTERS: [&str; 5] = ["pg", "mailbox", "flights", "kafka", "memory"];
/// The edges, where adapters are made and run (the binary's `src/cli` and `main.rs` reach the
/// library as `msgx::`, an edge of their own): the store rooms themselves, the daemon (its
/// `stores.rs` the factory), and the test builds' simulator and world.
const EDGES: [&str; 4] = ["store", "daemon", "sim", "testkit"];
/// The longest a production function may be (docs/architecture.md, "Invariants"): a longer one
/// is split where its steps are.
const FN_MAX_LINES: usize = 70;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Whether `attrs` hold `#[cfg(test)]` (or a `cfg(all(test, …))`): test code.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let Ok(list) = a.meta.require_list() else { return false };
        let args = list.tokens.to_string().replace(' ', "");
        a.path().is_ident("cfg") && (args == "test" || args.starts_with("all(test,"))
    })
}

/// `items` without test code, at every depth of inline modules and impls.
fn strip_tests(items: &mut Vec<syn::Item>) {
    items.retain(|item| match item {
        syn::Item::Fn(f) => !test_only(&f.attrs),
        syn::Item::Mod(m) => !test_only(&m.attrs),
        syn::Item::Impl(i) => !test_only(&i.attrs),
        syn::Item::Use(u) => !test_only(&u.attrs),
        syn::Item::Struct(s) => !test_only(&s.attrs),
        syn::Item::Enum(e) => !test_only(&e.attrs),
        syn::Item::Const(c) => !test_only(&c.attrs),
        syn::Item::Static(s) => !test_only(&s.attrs),
        syn::Item::Trait(t) => !test_only(&t.attrs),
        syn::Item::Macro(m) => !test_only(&m.attrs),
        _ => true,
    });
    for item in items.iter_mut() {
        match item {
            syn::Item::Mod(m) => {
                if let Some((_, inner)) = &mut m.content {
                    strip_tests(inner);
                }
            }
            syn::Item::Impl(i) => i.items.retain(|it| match it {
                syn::ImplItem::Fn(f) => !test_only(&f.attrs),
                syn::ImplItem::Const(c) => !test_only(&c.attrs),
                _ => true,
            }),
            _ => {}
        }
    }
}

/// The production part of a source text, parsed.
fn production(text: &str) -> syn::File {
    let mut file = syn::parse_file(text).unwrap_or_else(|e| panic!("not Rust: {e}"));
    strip_tests(&mut file.items);
    file
}

/// What the house rules need of one file: the `crate::…` paths it names (aliases of `use`
/// resolved: `use crate::store;` then `store::pg::Pg` is `crate::store::pg::Pg`), and each
/// function with a body (name, first line, lines from `fn` to its closing brace).
#[derive(Default)]
struct Read {
    aliases: BTreeMap<String, Vec<String>>,
    paths: Vec<Vec<String>>,
    functions: Vec<(String, usize, usize)>,
}

impl Read {
    fn of(file: &syn::File) -> Read {
        let mut r = Read::default();
        // The aliases first: a `use` may stand below the code that relies on it.
        for item in &file.items {
            if let syn::Item::Use(u) = item {
                r.use_tree(&[], &u.tree);
            }
        }
        r.visit_file(file);
        r
    }

    /// Every name a `use` tree binds, with the path it binds it to.
    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        let mut at = prefix.to_vec();
        match tree {
            syn::UseTree::Path(p) => {
                at.push(p.ident.to_string());
                self.use_tree(&at, &p.tree);
            }
            syn::UseTree::Name(n) if n.ident == "self" => self.bind(prefix.last().cloned(), prefix),
            syn::UseTree::Name(n) => {
                at.push(n.ident.to_string());
                self.bind(Some(n.ident.to_string()), &at);
            }
            syn::UseTree::Rename(r) => {
                at.push(r.ident.to_string());
                self.bind(Some(r.rename.to_string()), &at);
            }
            syn::UseTree::Glob(_) => self.paths.push(at),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.use_tree(prefix, t)),
        }
    }

    fn bind(&mut self, name: Option<String>, path: &[String]) {
        if let Some(name) = name {
            self.aliases.insert(name, path.to_vec());
        }
        self.paths.push(path.to_vec());
    }

    /// The `crate::…` paths named, aliases resolved.
    fn crate_paths(&self) -> Vec<Vec<String>> {
        let resolve = |p: &Vec<String>| -> Option<Vec<String>> {
            let first = p.first()?;
            if first == "crate" {
                return Some(p.clone());
            }
            let alias = self.aliases.get(first)?;
            Some(alias.iter().chain(&p[1..]).cloned().collect())
        };
        self.paths.iter().filter_map(resolve).filter(|p| p.first().is_some_and(|s| s == "crate")).collect()
    }

    fn function(&mut self, name: &syn::Ident, fn_token: &syn::token::Fn, body: &syn::Block) {
        let first = fn_token.span.start().line;
        let last = body.brace_token.span.close().end().line;
        self.functions.push((name.to_string(), first, last - first + 1));
    }
}

impl<'ast> Visit<'ast> for Read {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        self.paths.push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, p);
    }

    fn visit_item_use(&mut self, _: &'ast syn::ItemUse) {
        // Read with the aliases, first.
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig.ident, &f.sig.fn_token, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        self.function(&f.sig.ident, &f.sig.fn_token, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(body) = &f.default {
            self.function(&f.sig.ident, &f.sig.fn_token, body);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// The files of modules declared `#[cfg(test)] mod x;`: test code, wherever it lives.
fn test_modules(all: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    for f in all {
        let file = syn::parse_file(&std::fs::read_to_string(f).unwrap()).unwrap();
        let dir = match f.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs" | "main.rs") => f.parent().unwrap().to_path_buf(),
            _ => f.with_extension(""),
        };
        for item in &file.items {
            if let syn::Item::Mod(m) = item {
                if m.content.is_none() && test_only(&m.attrs) {
                    out.insert(dir.join(format!("{}.rs", m.ident)));
                    out.insert(dir.join(m.ident.to_string()));
                }
            }
        }
    }
    out
}

/// Every production file of `src`, with its top-level module and what it reads as code.
fn production_files() -> Vec<(String, String, Read)> {
    let src = src();
    let mut all = Vec::new();
    files(&src, &mut all);
    let tests = test_modules(&all);
    all.iter()
        .filter(|f| f.file_name().is_some_and(|n| n != "tests.rs"))
        .filter(|f| !f.components().any(|c| c.as_os_str() == "conformance"))
        .filter(|f| !tests.iter().any(|t| f.starts_with(t)))
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap();
            let first = rel.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
            let module = first.trim_end_matches(".rs").to_string();
            let read = Read::of(&production(&std::fs::read_to_string(f).unwrap()));
            (format!("src/{}", rel.display()), module, read)
        })
        .collect()
}

/// The imports of `module` (a file's, read as `read`) that climb the layers.
fn climbs(module: &str, read: &Read) -> Vec<String> {
    let used: BTreeSet<String> = read.crate_paths().iter().filter_map(|p| p.get(1).cloned()).collect();
    let mut wrong = Vec::new();
    for u in &used {
        if STAGES.contains(&module) && STAGES.contains(&u.as_str()) && u != module {
            wrong.push(format!("the stage {module} imports the stage {u}"));
        }
        if module == "store" && STAGES.contains(&u.as_str()) {
            wrong.push(format!("a store adapter imports the stage {u}"));
        }
        if module == "config" && !CONFIG_MAY_USE.contains(&u.as_str()) {
            wrong.push(format!("config imports {u} (config is a leaf)"));
        }
    }
    wrong
}

/// The adapters a file of `module` names outside the edges.
fn adapters_named(module: &str, read: &Read) -> BTreeSet<String> {
    if EDGES.contains(&module) {
        return BTreeSet::new();
    }
    let named = read.crate_paths().into_iter().filter(|p| p.get(1).is_some_and(|s| s == "store"));
    named.filter_map(|p| p.get(2).cloned()).filter(|a| ADAPTERS.contains(&a.as_str())).collect()
}

fn long_functions(read: &Read) -> Vec<String> {
    let long = read.functions.iter().filter(|(_, _, n)| *n > FN_MAX_LINES);
    long.map(|(name, line, n)| format!("{line}: fn {name} has {n} lines")).collect()
}

/// The rooms each room names (`crate::<room>::…`, aliases resolved), itself left out.
fn rooms(files: &[(String, String, Read)]) -> BTreeMap<String, BTreeSet<String>> {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, module, read) in files {
        let named = read.crate_paths().into_iter().filter_map(|p| p.get(1).cloned());
        g.entry(module.clone()).or_default().extend(named.filter(|u| u != module));
    }
    g
}

/// Every circle between rooms: each a set of rooms that reach one another (a strongly connected
/// component of more than one room), in name order.
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &str| -> BTreeSet<String> {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![from.to_string()]);
        while let Some(m) = todo.pop() {
            for u in g.get(&m).into_iter().flatten() {
                if seen.insert(u.clone()) {
                    todo.push(u.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = g.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (m, r) in &reaches {
        let circle: Vec<String> = reaches
            .iter()
            .filter(|(n, rn)| r.contains(n.as_str()) && rn.contains(m.as_str()))
            .map(|(n, _)| n.to_string())
            .collect();
        if circle.len() > 1 && !out.contains(&circle) {
            out.push(circle);
        }
    }
    out
}

/// Where this release's rulebook may be named (#65): where an instance or a command starts —
/// the binary (`cli`, `main`), the test builds' simulator and world —, the codec, whose
/// `decode` (tests', benches' and fixtures' shorthand) decodes under it, and the test fixtures,
/// which make the next release from it. Every other room is handed the rulebook its instance
/// carries.
const RULES_EDGES: [&str; 6] = ["cli", "main", "sim", "testkit", "codec", "fixtures"];

/// What a file of `module` names of this release's rules outside [`RULES_EDGES`]:
/// `Rulebook::this_release`, or `codec::decode`, which decodes under it.
fn this_release_named(module: &str, read: &Read) -> BTreeSet<String> {
    if RULES_EDGES.contains(&module) {
        return BTreeSet::new();
    }
    let mut named = BTreeSet::new();
    for p in read.paths.iter().chain(&read.crate_paths()) {
        if p.ends_with(&["Rulebook".to_string(), "this_release".to_string()]) {
            named.insert("Rulebook::this_release".to_string());
        }
        if p.len() == 3 && p[0] == "crate" && p[1] == "codec" && p[2] == "decode" {
            named.insert("codec::decode".to_string());
        }
    }
    named
}

#[test]
fn no_import_climbs_the_layers() {
    let wrong: Vec<String> = production_files()
        .iter()
        .flat_map(|(file, module, read)| {
            climbs(module, read).into_iter().map(move |w| format!("{file}: {w}"))
        })
        .collect();
    assert!(wrong.is_empty(), "imports that climb the layers (docs/architecture.md):\n{}", wrong.join("\n"));
}

/// #56: rooms that decide (stages, handlers, the codec, lineage, the console…) reach stores
/// only through the ports; an adapter is named only at the edges.
#[test]
fn no_adapter_is_named_outside_the_edges() {
    let mut wrong = Vec::new();
    for (file, module, read) in production_files() {
        for a in adapters_named(&module, &read) {
            wrong.push(format!("{file}: names the adapter store::{a} (reach it through a port)"));
        }
    }
    assert!(
        wrong.is_empty(),
        "adapters named outside the edges (docs/architecture.md):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_production_function_is_longer_than_seventy_lines() {
    let long: Vec<String> = production_files()
        .iter()
        .flat_map(|(file, _, read)| long_functions(read).into_iter().map(move |l| format!("{file}:{l}")))
        .collect();
    assert!(
        long.is_empty(),
        "production functions over {FN_MAX_LINES} lines (split them):\n{}",
        long.join("\n")
    );
}

/// #65: rooms that reach one another cannot be read, changed or tested one at a time.
#[test]
fn no_circle_between_rooms() {
    let found = circles(&rooms(&production_files()));
    assert!(found.is_empty(), "rooms that reach one another (docs/architecture.md, \"Layers\"): {found:?}");
}

/// #65: a release's rules are a value its instance carries; no room but an edge reads this
/// release's.
#[test]
fn this_releases_rules_are_named_only_where_an_instance_starts() {
    let mut wrong = Vec::new();
    for (file, module, read) in production_files() {
        for n in this_release_named(&module, &read) {
            wrong.push(format!("{file}: names {n} (decode under the rulebook the instance carries)"));
        }
    }
    assert!(wrong.is_empty(), "this release's rules read past the edges:\n{}", wrong.join("\n"));
}

// ------------------------------------------------------------------ the rules, proven planted

/// A production text whose first `#[cfg(test)]` stands near the top, as in `consistency/mod.rs`:
/// what follows it is production code all the same.
const EARLY_TEST_MODULE: &str = "#[cfg(test)]\nmod tests;\n#[cfg(test)]\nuse crate::pump::Pump;\n";

#[test]
fn a_stage_importing_a_stage_below_an_early_cfg_test_is_found() {
    let text = format!(
        "{EARLY_TEST_MODULE}use crate::{{pump::Pump, stage}};\nfn f() {{ let _ = crate::lease::X; }}\n"
    );
    assert_eq!(
        climbs("consistency", &Read::of(&production(&text))),
        ["the stage consistency imports the stage pump"]
    );
    // The test code's own import is not production's.
    let only_test = format!("{EARLY_TEST_MODULE}fn f() {{}}\n");
    assert!(climbs("consistency", &Read::of(&production(&only_test))).is_empty());
    let config = "use crate::{clock::Clock, secret};\nfn f() -> crate::lease::Policy { todo!() }\n";
    assert_eq!(climbs("config", &Read::of(&production(config))), ["config imports lease (config is a leaf)"]);
}

#[test]
fn an_adapter_named_through_an_alias_or_a_group_is_found() {
    let aliased = format!("{EARLY_TEST_MODULE}use crate::store;\nfn f() {{ store::pg::Pg::connect(); }}\n");
    let found: Vec<String> =
        adapters_named("handlers", &Read::of(&production(&aliased))).into_iter().collect();
    assert_eq!(found, ["pg"]);
    let grouped = "use crate::store::{memory::MemPg, write_token};\nuse crate::store::kafka as k;\nfn f(_: k::Producer) {}\n";
    let found: Vec<String> = adapters_named("lineage", &Read::of(&production(grouped))).into_iter().collect();
    assert_eq!(found, ["kafka", "memory"]);
    assert!(adapters_named("daemon", &Read::of(&production(grouped))).is_empty(), "an edge may");
}

#[test]
fn an_eighty_line_function_below_an_early_cfg_test_is_found_and_text_is_not_code() {
    let body: String = (0..78).map(|i| format!("    let _v{i} = \"}}}}\";\n")).collect();
    let text = format!("{EARLY_TEST_MODULE}/// Doc lines do not count.\nfn long() {{\n{body}}}\nfn short<'x>(v: &'x str) -> &'x str {{\n    v\n}}\n");
    let read = Read::of(&production(&text));
    let lines: Vec<(String, usize)> = read.functions.iter().map(|(n, _, l)| (n.clone(), *l)).collect();
    assert_eq!(lines, [("long".to_string(), 80), ("short".to_string(), 3)]);
    assert_eq!(long_functions(&read), ["6: fn long has 80 lines"]);
    let in_tests = format!("#[cfg(test)]\nmod tests {{\n    fn long() {{\n{body}    }}\n}}\n");
    assert!(long_functions(&Read::of(&production(&in_tests))).is_empty(), "test code is left out");
}

#[test]
fn a_circle_between_rooms_is_found_through_a_third() {
    let file = |module: &str, text: &str| {
        (format!("src/{module}.rs"), module.to_string(), Read::of(&production(text)))
    };
    let files = vec![
        file(
            "handlers",
            &format!("{EARLY_TEST_MODULE}pub struct D {{ pub a: Option<crate::requests::Answer> }}\n"),
        ),
        file("requests", "use crate::lineage as l;\nfn f() { l::x(); }\n"),
        file("lineage", "use crate::{handlers::decide, codec};\n"),
        file("codec", "use crate::config::Limits;\n"),
        file("config", "#[cfg(test)]\nuse crate::codec::decode;\n"),
    ];
    assert_eq!(circles(&rooms(&files)), [["handlers", "lineage", "requests"]]);
    // The test code's import makes no circle; without the handlers' field there is none.
    let files: Vec<_> = files.into_iter().skip(1).collect();
    assert!(circles(&rooms(&files)).is_empty());
}

#[test]
fn this_releases_rules_named_past_the_edges_are_found() {
    let text = format!(
        "{EARLY_TEST_MODULE}use crate::codec::{{self, decode}};\nfn f(t: &str) {{ let r = codec::Rulebook::this_release(); decode(t); }}\n"
    );
    let read = Read::of(&production(&text));
    let found: Vec<String> = this_release_named("daemon", &read).into_iter().collect();
    assert_eq!(found, ["Rulebook::this_release", "codec::decode"]);
    assert!(this_release_named("cli", &read).is_empty(), "where a command starts, it may");
    let handed =
        "fn f(t: &str, rules: &crate::codec::Rulebook) { crate::codec::decode_with(t, &L, rules); }\n";
    assert!(this_release_named("consistency", &Read::of(&production(handed))).is_empty());
}

// ------------------------------------------------------------- log lines and upstream text

/// Fields that hold upstream text — a message's META, a decoder's detail about it, a mailbox
/// text, an error recorded from it, a person's note: a log line prints them only through the
/// one quoting type (`logline::Quoted`, `logline::Upstream`), so no message can end a line or
/// forge a `key=value` (#53, #68: the heal printed a decode error bare).
const UPSTREAM_FIELDS: [&str; 12] = [
    "detail",
    "raw",
    "text",
    "xml",
    "sndr",
    "msg_type",
    "styp",
    "seqn",
    "type_tag",
    "last_error",
    "note",
    "rmid",
];
const LOG_MACROS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// A log macro's arguments: `[target: T,] "format", args…`.
fn log_args(tokens: proc_macro2::TokenStream) -> Vec<syn::Expr> {
    use syn::parse::Parser;
    let parser = |input: syn::parse::ParseStream| {
        if input.peek(syn::Ident) && input.peek2(syn::Token![:]) && !input.peek2(syn::Token![::]) {
            input.parse::<syn::Ident>()?;
            input.parse::<syn::Token![:]>()?;
            input.parse::<syn::Expr>()?;
            input.parse::<syn::Token![,]>()?;
        }
        syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated(input)
    };
    parser.parse2(tokens).map(|args| args.into_iter().skip(1).collect()).unwrap_or_default()
}

/// The upstream field `e` prints bare, if it does: one read anywhere in it, unless `e` is the
/// quoting type itself.
fn bare_upstream(e: &syn::Expr) -> Option<String> {
    struct Fields(Vec<String>);
    impl<'ast> Visit<'ast> for Fields {
        fn visit_expr_field(&mut self, f: &'ast syn::ExprField) {
            if let syn::Member::Named(n) = &f.member {
                if UPSTREAM_FIELDS.contains(&n.to_string().as_str()) {
                    self.0.push(n.to_string());
                }
            }
            syn::visit::visit_expr_field(self, f);
        }
    }
    let value = match e {
        syn::Expr::Assign(a) => &*a.right,
        e => e,
    };
    if let syn::Expr::Call(c) = value {
        if let syn::Expr::Path(p) = &*c.func {
            let last = p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
            if last == "Quoted" || last == "Upstream" {
                return None;
            }
        }
    }
    let mut found = Fields(Vec::new());
    found.visit_expr(value);
    found.0.into_iter().next()
}

/// The log sites of a file that print an upstream field bare: (line, field).
fn bare_log_sites(file: &syn::File) -> Vec<(usize, String)> {
    struct Sites(Vec<(usize, String)>);
    impl<'ast> Visit<'ast> for Sites {
        fn visit_macro(&mut self, m: &'ast syn::Macro) {
            let name = m.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
            if LOG_MACROS.contains(&name.as_str()) {
                for a in log_args(m.tokens.clone()) {
                    if let Some(field) = bare_upstream(&a) {
                        self.0.push((m.path.segments[0].ident.span().start().line, field));
                    }
                }
            }
            syn::visit::visit_macro(self, m);
        }
    }
    let mut sites = Sites(Vec::new());
    sites.visit_file(file);
    sites.0
}

/// #68: every log site of `src` that prints upstream text, walked: each through the quoting
/// type.
#[test]
fn no_log_line_prints_upstream_text_bare() {
    let src = src();
    let mut all = Vec::new();
    files(&src, &mut all);
    let mut bare = Vec::new();
    for f in &all {
        let file = production(&std::fs::read_to_string(f).unwrap());
        for (line, field) in bare_log_sites(&file) {
            bare.push(format!(
                "src/{}:{line}: .{field} printed bare",
                f.strip_prefix(&src).unwrap().display()
            ));
        }
    }
    assert!(
        bare.is_empty(),
        "log lines that print upstream text without Quoted/Upstream:\n{}",
        bare.join("\n")
    );
}

#[test]
fn a_log_line_that_prints_upstream_text_bare_is_found() {
    let text = r#"
fn f(e: &DecodeError, row: &ProcRow) {
    warn!("rebuild: msg_id={m} no longer decodes ({})", e.detail);
    log::error!(target: super::LOG, "dead error={}", row.last_error.as_deref().unwrap_or("-"));
    warn!("fine {} {}", Quoted(&e.detail), crate::logline::Upstream(row.type_tag.as_deref().unwrap_or("-")));
    info!("counted {n} and {}", row.msg_id);
}
"#;
    let sites = bare_log_sites(&production(text));
    assert_eq!(sites, [(3, "detail".to_string()), (4, "last_error".to_string())]);
}
