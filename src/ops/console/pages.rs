//! The console's pages: askama templates, checked when msgx is compiled, escaping every value
//! they print (a text that came from upstream renders as text). Each page is given plain
//! strings and rows; the layout wraps a page's already escaped HTML.

use askama::Template;

/// A link: where, and its text.
pub struct Link {
    pub href: String,
    pub text: String,
}

#[derive(Template)]
#[template(
    ext = "html",
    source = r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>msgx · {{ title }}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222 }
nav a { margin-right: 1em } table { border-collapse: collapse; margin: .5em 0 1em }
td, th { border: 1px solid #ccc; padding: .2em .5em; text-align: left; vertical-align: top }
th { background: #f3f3f3 } code, .mono { font-family: ui-monospace, monospace; white-space: pre-wrap; word-break: break-all }
.bad { color: #a00 } .ok { color: #060 } .muted { color: #777 }
</style></head>
<body><nav><a href="/">overview</a><a href="/dead">dead letters</a>
<form method="get" action="/find" style="display:inline"><input name="msg_id" placeholder="MSG_ID" size="10"><input name="flid" placeholder="FLID" size="10"><button>follow</button></form></nav>
<h1>{{ title }}</h1>
{{ body|safe }}
<p class="muted">msgx {{ version }} · read only</p>
</body></html>"#
)]
pub struct Layout<'a> {
    pub title: &'a str,
    /// The page's HTML, escaped by its own template.
    pub body: &'a str,
    pub version: &'a str,
}

/// One row of a two-column table.
pub struct Pair {
    pub name: String,
    pub value: String,
}

#[derive(Template)]
#[template(
    ext = "html",
    source = r#"<p class="{% if ready %}ok{% else %}bad{% endif %}">{{ role }}</p>
<table><tr><th>stage</th><th>turn</th></tr>
{% for s in stages %}<tr><td>{{ s.name }}</td><td>{{ s.value }}</td></tr>{% endfor %}
</table>
<h2>Stores</h2>
<table>{% for s in stores %}<tr><td>{{ s.name }}</td><td>{{ s.value }}</td></tr>{% endfor %}</table>
<h2>Queue and dead letters</h2>
<p class="muted">{{ gauges_age }}</p>
<table>{% for g in gauges %}<tr><td>{{ g.name }}</td><td>{{ g.value }}</td></tr>{% endfor %}</table>
<p><a href="/dead">the dead-letter queue</a></p>"#
)]
pub struct Overview {
    pub role: String,
    pub ready: bool,
    pub stages: Vec<Pair>,
    pub stores: Vec<Pair>,
    pub gauges_age: String,
    pub gauges: Vec<Pair>,
}

pub struct DeadRow {
    pub msg: Link,
    pub type_tag: String,
    pub class: String,
    pub attempts: i32,
    pub since: String,
    pub error: String,
    pub dismissed: String,
}

#[derive(Template)]
#[template(
    ext = "html",
    source = r#"{% if rows.is_empty() %}<p>No DEAD message.</p>{% else %}
<table><tr><th>MSG_ID</th><th>type</th><th>class</th><th>attempts</th><th>since</th><th>error</th><th>dismissed</th></tr>
{% for r in rows %}<tr><td><a href="{{ r.msg.href }}">{{ r.msg.text }}</a></td><td>{{ r.type_tag }}</td><td>{{ r.class }}</td><td>{{ r.attempts }}</td><td>{{ r.since }}</td><td class="mono">{{ r.error }}</td><td>{{ r.dismissed }}</td></tr>
{% endfor %}</table>{% if more %}<p class="muted">the first {{ rows.len() }}; <code>msgx dead --limit</code> lists more</p>{% endif %}{% endif %}"#
)]
pub struct Dead {
    pub rows: Vec<DeadRow>,
    pub more: bool,
}

pub struct EventRow {
    pub event_key: String,
    pub msg: Option<Link>,
    pub target: String,
    pub state: String,
    pub sent_at: String,
    pub landed: String,
    pub payload: String,
    pub changes: Vec<String>,
    pub type_tag: String,
}

#[derive(Template)]
#[template(
    ext = "html",
    source = r#"<table>{% for p in facts %}<tr><th>{{ p.name }}</th><td class="mono">{{ p.value }}</td></tr>{% endfor %}
<tr><th>flights</th><td>{% for f in flights %}<a href="{{ f.href }}">{{ f.text }}</a> {% endfor %}</td></tr></table>
<h2>Events</h2>
{% if events.is_empty() %}<p>None (no flight changed, or pruned after event-retention).</p>{% else %}
<table><tr><th>event_key</th><th>target</th><th>state</th><th>sent</th><th>landed</th><th>payload</th></tr>
{% for e in events %}<tr><td class="mono">{{ e.event_key }}</td><td>{{ e.target }}</td><td>{{ e.state }}</td><td>{{ e.sent_at }}</td><td>{{ e.landed }}</td><td class="mono">{{ e.payload }}</td></tr>
{% endfor %}</table>{% endif %}"#
)]
pub struct Trace {
    pub facts: Vec<Pair>,
    pub flights: Vec<Link>,
    pub events: Vec<EventRow>,
}

pub struct FieldRow {
    pub name: String,
    pub value: String,
    pub msg: Option<Link>,
    pub type_tag: String,
    pub set_at: String,
}

#[derive(Template)]
#[template(
    ext = "html",
    source = r#"<p>{{ summary }}</p>
<table><tr><th>field</th><th>value</th><th>set by MSG_ID</th><th>type</th><th>when</th></tr>
{% for f in fields %}<tr><td>{{ f.name }}</td><td class="mono">{{ f.value }}</td><td>{% if let Some(m) = f.msg %}<a href="{{ m.href }}">{{ m.text }}</a>{% else %}-{% endif %}</td><td>{{ f.type_tag }}</td><td>{{ f.set_at }}</td></tr>
{% endfor %}</table>
<h2>Changes, newest first</h2>
{% if changes.is_empty() %}<p>None kept (no event names it, or pruned after event-retention).</p>{% else %}
<table><tr><th>MSG_ID</th><th>type</th><th>changes</th><th>event_key</th><th>state</th><th>sent</th><th>landed</th></tr>
{% for c in changes %}<tr><td>{% if let Some(m) = c.msg %}<a href="{{ m.href }}">{{ m.text }}</a>{% else %}-{% endif %}</td><td>{{ c.type_tag }}</td><td class="mono">{% for x in c.changes %}{{ x }}<br>{% endfor %}</td><td class="mono">{{ c.event_key }}</td><td>{{ c.state }}</td><td>{{ c.sent_at }}</td><td>{{ c.landed }}</td></tr>
{% endfor %}</table>{% endif %}"#
)]
pub struct Flight {
    pub summary: String,
    pub fields: Vec<FieldRow>,
    pub changes: Vec<EventRow>,
}

#[derive(Template)]
#[template(ext = "html", source = r#"<p class="bad">{{ message }}</p>"#)]
pub struct Problem {
    pub message: String,
}
