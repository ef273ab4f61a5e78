//! Every selector operator, the round trip through Display, and every parse error message.

use watchcache::selector::{FieldOp, LabelOp};
use watchcache::{FieldSelector, LabelSelector};

fn labels<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a str> + 'a {
    move |k| pairs.iter().find(|(x, _)| *x == k).map(|(_, v)| *v)
}

#[test]
fn label_operators_match_as_upstream() {
    let obj = [
        ("app", "web"),
        ("tier", "front"),
        ("rank", "5"),
        ("in", "notin"),
    ];
    let cases: &[(&str, bool, LabelOp)] = &[
        ("app=web", true, LabelOp::Equals),
        ("app=db", false, LabelOp::Equals),
        ("app==web", true, LabelOp::DoubleEquals),
        ("app!=db", true, LabelOp::NotEquals),
        ("app!=web", false, LabelOp::NotEquals),
        ("missing!=x", true, LabelOp::NotEquals),
        ("app in (db,web)", true, LabelOp::In),
        ("app in (db)", false, LabelOp::In),
        ("missing in (x)", false, LabelOp::In),
        ("app notin (db)", true, LabelOp::NotIn),
        ("app notin (web)", false, LabelOp::NotIn),
        ("missing notin (web)", true, LabelOp::NotIn),
        ("app", true, LabelOp::Exists),
        ("missing", false, LabelOp::Exists),
        ("!missing", true, LabelOp::DoesNotExist),
        ("!app", false, LabelOp::DoesNotExist),
        ("rank>4", true, LabelOp::GreaterThan),
        ("rank>5", false, LabelOp::GreaterThan),
        ("app>1", false, LabelOp::GreaterThan),
        ("rank<6", true, LabelOp::LessThan),
        ("rank<0", false, LabelOp::LessThan),
        ("missing<6", false, LabelOp::LessThan),
        ("in=notin", true, LabelOp::Equals),
        ("in in (in,notin)", true, LabelOp::In),
    ];
    for (text, want, op) in cases {
        let sel = LabelSelector::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(sel.requirements()[0].op(), *op, "{text}");
        assert_eq!(sel.matches(labels(&obj)), *want, "{text}");
    }
}

#[test]
fn label_selectors_and_and_round_trip() {
    let obj = [("app", "web"), ("tier", "front")];
    let sel = LabelSelector::parse(" tier in (front, back) , app=web,!canary ").unwrap();
    assert!(sel.matches(labels(&obj)));
    assert_eq!(sel.to_string(), "app=web,!canary,tier in (back,front)");
    assert_eq!(LabelSelector::parse(&sel.to_string()).unwrap(), sel);
    assert!(LabelSelector::parse("").unwrap().is_empty());
    assert!(
        !LabelSelector::parse("app=web,tier=back")
            .unwrap()
            .matches(labels(&obj))
    );
    // Empty members, as upstream: "()" holds "", "x=" compares with "".
    assert_eq!(
        LabelSelector::parse("x in ()").unwrap().requirements()[0].values(),
        [""]
    );
    assert_eq!(
        LabelSelector::parse("x in (a,,b)").unwrap().requirements()[0].values(),
        ["", "a", "b"]
    );
    assert!(
        LabelSelector::parse("x=")
            .unwrap()
            .matches(labels(&[("x", "")]))
    );
    assert!(LabelSelector::parse("example.com/role=db").is_ok());
}

#[test]
fn label_errors_name_position_and_expectation() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "app=web,",
            8,
            "found end of string, expected: identifier after ','",
        ),
        ("app=(", 4, "found '(', expected: identifier"),
        ("app in web", 7, "found 'web', expected: '('"),
        ("app in (a b)", 10, "found 'b', expected: ',' or ')'"),
        ("app in (a", 9, "found end of string, expected: ',' or ')'"),
        (
            "app web",
            4,
            "found 'web', expected: in, notin, =, ==, !=, gt, lt",
        ),
        (
            "=web",
            0,
            "found '=', expected: !, identifier, or end of string",
        ),
        ("app=web)", 7, "found ')', expected: ',' or end of string"),
        ("!app=web", 4, "expected: ',' or end of string after '!app'"),
        ("-bad=x", 0, "invalid label key \"-bad\""),
        (
            "Bad_/x=y",
            0,
            "prefix part must be a lowercase DNS subdomain",
        ),
        ("app=-x", 4, "invalid value for label \"app\""),
        ("rank>five", 5, "the value must be an integer"),
        ("!", 1, "found end of string, expected: identifier"),
    ];
    for (text, pos, msg) in cases {
        let e = LabelSelector::parse(text).expect_err(text);
        assert_eq!(e.position(), *pos, "{text}: {e}");
        assert!(e.message().contains(msg), "{text}: got {e}");
        assert!(e.to_string().starts_with(&format!(
            "unable to parse label selector \"{text}\": at position {pos}"
        )));
    }
    let long = format!("app={}", "v".repeat(64));
    assert!(
        LabelSelector::parse(&long)
            .unwrap_err()
            .message()
            .contains("at most 63")
    );
}

#[test]
fn field_operators_and_escaping() {
    let sel =
        FieldSelector::parse(r"spec.nodeName=n1,status.phase!=Failed,metadata.name==a\,b\=c\\d")
            .unwrap();
    let ops: Vec<_> = sel
        .requirements()
        .iter()
        .map(|r| (r.path().as_str(), r.op(), r.value()))
        .collect();
    assert!(ops.contains(&("spec.nodeName", FieldOp::Equals, "n1")));
    assert!(ops.contains(&("status.phase", FieldOp::NotEquals, "Failed")));
    assert!(ops.contains(&("metadata.name", FieldOp::DoubleEquals, r"a,b=c\d")));
    assert_eq!(sel.required_value("spec.nodeName"), Some("n1"));
    assert_eq!(sel.required_value("status.phase"), None);
    assert_eq!(FieldSelector::parse(&sel.to_string()).unwrap(), sel);
    let r = FieldSelector::parse("a!=x").unwrap().requirements()[0].clone();
    assert!(r.matches("y") && !r.matches("x"));
    let r = FieldSelector::parse("a=").unwrap().requirements()[0].clone();
    assert!(r.matches("") && !r.matches("x"));
    assert!(FieldSelector::parse("").unwrap().is_empty());
    assert_eq!(
        FieldSelector::parse("a=b,,c=d")
            .unwrap()
            .requirements()
            .len(),
        2
    );
    // The first operator wins: "a!==b" is a != "=b"... which upstream rejects as an unescaped '='.
    assert!(
        FieldSelector::parse("a!==b")
            .unwrap_err()
            .message()
            .contains("unescaped '='")
    );
}

#[test]
fn field_errors_name_position_and_expectation() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "spec.nodeName",
            0,
            "can't understand 'spec.nodeName': expected an operator '=', '==' or '!='",
        ),
        ("a=b,c", 4, "can't understand 'c'"),
        ("=b", 0, "field path is empty"),
        ("a..b=c", 0, "segment 2 is empty"),
        ("a=b=c", 3, "unescaped '=' in value"),
        (r"a=b\x", 3, r"invalid escape sequence '\x'"),
        ("a=b\\", 3, "trailing '\\'"),
        ("sp ec=x", 0, "unexpected character ' '"),
    ];
    for (text, pos, msg) in cases {
        let e = FieldSelector::parse(text).expect_err(text);
        assert_eq!(e.position(), *pos, "{text}: {e}");
        assert!(e.message().contains(msg), "{text}: got {e}");
        assert!(e.to_string().starts_with(&format!(
            "unable to parse field selector \"{text}\": at position {pos}"
        )));
    }
    let err: watchcache::Error = FieldSelector::parse("nope").unwrap_err().into();
    assert_eq!((err.code(), err.reason()), (400, "BadRequest"));
}
