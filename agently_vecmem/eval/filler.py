"""Seeded filler for the growth probe: grammatical sentences of random meaning that look like user facts.

A long-term memory grows: the facts a user asks about end up among thousands of others. The growth probe
(``agently-vecmem eval probe --filler N``) stores the bilingual probe's facts of one language among ``N``
filler sentences of the same language and asks the same questions. The filler here is built to compete:

* **Grammatical, random meaning.** Each sentence fills slots of a natural word order from typed word
  lists: subject, time, place, verb and an object that verb takes, sometimes a companion. English:
  ``My sister bought a second-hand piano at the river park in Chengdu last weekend.``; Chinese keeps
  subject, time, companion, place, verb, object (with its measure word after a completed action):
  ``我姐姐上个月和同事们一起在成都的咖啡馆吃了一顿火锅。`` Habits take the present tense (English) or
  ``每…都`` without ``了`` (Chinese): ``我哥哥每个周末都在公共游泳池练羽毛球。``
* **Often sharing words with the facts.** The word lists are everyday life (family, food, pets, work,
  places, hobbies), much of it the vocabulary of user facts; given the facts (``facts=``), each slot picks a
  word that occurs in them 30% of the time (:data:`FACT_SHARE`), and names from the facts (English
  capitalised names, the Latin product names and 《titles》 of Chinese facts) become things to talk about.
  Chinese filler has no Latin letters except those names.
* **Deterministic.** The sentences depend only on ``(lang, n, seed, facts)``; the first ``n`` sentences of a
  larger ``n`` are the sentences of the smaller one (a growth curve's stores are nested), and no sentence
  repeats within one call (unless the slots run out: over a million combinations per language).

:func:`filler_sentences` is pure Python string work: 100,000 sentences of either language in about 0.3 s on
the 2-core development machine (``timeit`` of ``filler_sentences("zh", 100_000, facts=...)``).
:func:`filler_records` wraps them as validated GLOBAL memories (pydantic validation: ~50 µs each)
marked ``provenance.filler = True`` (:func:`is_filler`), so an evaluation never counts one as an answer.

Example:
    >>> filler_sentences("en", 2, seed=1) == filler_sentences("en", 2, seed=1)
    True
    >>> all(s.endswith("。") for s in filler_sentences("zh", 3))
    True
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..errors import ConfigurationError
from ..records import MemoryRecord, Provenance

__all__ = ["FILLER_LANGUAGES", "FACT_SHARE", "filler_sentences", "filler_records", "is_filler"]

#: Languages the generator writes.
FILLER_LANGUAGES: tuple[str, ...] = ("en", "zh")
#: Probability that a slot takes a word occurring in the facts (when there is one).
FACT_SHARE = 0.3

# ------------------------------------------------------------------------------------------- English
# (text, verb form): "base" subjects take the base form in the present tense, "3" the third person.
_EN_SUBJECTS: tuple[tuple[str, str], ...] = (
    ("I", "base"), ("My sister", "3"), ("My brother", "3"), ("My wife", "3"), ("My husband", "3"),
    ("My son", "3"), ("My daughter", "3"), ("My neighbour", "3"), ("My colleague", "3"), ("My boss", "3"),
    ("My best friend", "3"), ("My mother", "3"), ("My father", "3"), ("My grandfather", "3"),
    ("My grandmother", "3"), ("My cousin", "3"), ("My parents", "base"), ("Our team", "3"),
    ("My roommate", "3"), ("Wang Lei", "3"), ("Lin", "3"), ("My son's teacher", "3"), ("My twin brother", "3"),
    ("My neighbour's kid", "3"), ("My girlfriend", "3"), ("The shop manager", "3"),
    ("My grandparents", "base"), ("My colleagues", "base"), ("Tom from the office", "3"),
)
_EN_PAST_TIMES = (
    "last month", "last winter", "last weekend", "yesterday", "two years ago", "last Tuesday", "on Christmas Eve",
    "during the Spring Festival", "in May 2023", "three weeks ago", "last summer", "after lunch on Friday",
    "on the ninth of October", "during the Qingming holiday", "in March 2022", "the day before yesterday",
    "last night", "ten years ago", "on Sunday morning", "before work on Monday", "in the autumn of 2021",
)
_EN_HABIT_TIMES = (
    "every morning", "every evening", "every Saturday afternoon", "on weekends", "every Wednesday evening",
    "most evenings", "every month", "on Mondays and Fridays", "every morning at seven", "after ten in the evening",
    "every Sunday", "before work", "around midnight", "on holidays", "every Spring Festival", "twice a week",
)
# (text, a city may follow)
_EN_PLACES: tuple[tuple[str, bool], ...] = (
    ("at the river park", True), ("at a children's hospital", True), ("at the animal shelter", True),
    ("at the gym", True), ("at a bookshop", True), ("at the public pool", True),
    ("on the subway", False), ("on the train", False), ("at home", False), ("at a music school", True),
    ("at the office", False), ("at a small bakery", True), ("on the balcony", False), ("at a design studio", True),
    ("at the university", True), ("in a small village", False), ("at a shopping mall", True),
    ("at the airport", True), ("at a seafood restaurant", True), ("in a fishing town", False),
    ("at the hospital", True), ("at a coffee shop", True), ("on a boat", False), ("at the bus stop", True),
    ("at the high school", True), ("at a hot pot restaurant", True), ("at the railway station", True),
    ("at the orchestra rehearsal", False), ("at the hiking club", False), ("at the grandparents' house", False),
)
_EN_CITIES = ("Chengdu", "Hangzhou", "Madrid", "Shenzhen", "Beijing", "Shanghai", "Qingdao", "Xi'an", "Wuhan",
              "Tokyo", "Hokkaido", "Barcelona", "Guangzhou", "Nanjing")
_EN_COMPANIONS = ("with my colleagues", "with my best friend", "with my college friends", "with the neighbours",
                  "with my grandparents", "with Wang Lei", "with my twin brother", "with the kids")
# verb category -> (past, third person, base)
_EN_VERBS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "thing": (("bought", "buys", "buy"), ("lost", "loses", "lose"), ("borrowed", "borrows", "borrow"),
              ("photographed", "photographs", "photograph"), ("sold", "sells", "sell"), ("found", "finds", "find"),
              ("repaired", "repairs", "repair"), ("cleaned", "cleans", "clean"), ("carried", "carries", "carry"),
              ("showed off", "shows off", "show off")),
    "food": (("ate", "eats", "eat"), ("ordered", "orders", "order"), ("cooked", "cooks", "cook"),
             ("tried", "tries", "try"), ("shared", "shares", "share")),
    "drink": (("drank", "drinks", "drink"), ("ordered", "orders", "order"), ("made", "makes", "make")),
    "skill": (("practised", "practises", "practise"), ("learned", "learns", "learn"),
              ("studied", "studies", "study"), ("taught", "teaches", "teach")),
    "topic": (("talked about", "talks about", "talk about"), ("read about", "reads about", "read about"),
              ("asked about", "asks about", "ask about"), ("wrote about", "writes about", "write about"),
              ("complained about", "complains about", "complain about"), ("heard about", "hears about", "hear about"),
              ("dreamed about", "dreams about", "dream about")),
}
_EN_OBJECTS: dict[str, tuple[str, ...]] = {
    "thing": (
        "a white car", "a second-hand piano", "a violin", "an old laptop", "a road bike", "a blue phone case",
        "some old stamps", "a pair of glasses", "a leather wallet", "a history book", "a novel",
        "some old records", "a kitten", "a beagle", "a drum kit", "a wheelchair", "a bar of handmade soap",
        "an apartment", "a badminton racket", "a football", "a map of Iceland", "a dinosaur model",
        "a box of family photos", "a train ticket", "a mobile phone", "an e-reader", "a stack of paper books",
        "a pair of skis", "a swimming cap", "a watch", "an umbrella", "a chemistry textbook", "a tomato plant",
        "a wedding ring", "a camera", "a suitcase", "a beach house", "a cat toy",
    ),
    "food": (
        "peanuts", "Sichuan food", "grilled oysters", "a mango", "croissants", "fresh tomatoes", "dumplings",
        "beef noodles", "seafood", "shellfish", "gluten-free bread", "hot pot", "steamed buns",
        "vegetarian dishes", "a bowl of rice", "snacks", "a birthday cake", "fried chicken", "tofu", "meat",
    ),
    "drink": ("green tea", "coffee", "oat milk", "lemon water", "a glass of orange juice", "milk tea",
              "a cup of hot chocolate", "beer", "a flat white"),
    "skill": (
        "the violin", "the piano", "the drums", "swimming", "skiing", "badminton", "meditation", "pottery", "Spanish",
        "Cantonese", "Mandarin", "English", "chemistry", "medicine", "machine learning", "civil engineering",
        "maths", "yoga", "photography", "calligraphy", "football", "chess",
    ),
    "topic": (
        "the northern lights", "the Tang dynasty", "horror movies", "romantic comedies", "the war",
        "high blood pressure", "motion sickness", "cat hair", "the Spring Festival", "the new mobile app project",
        "a new job", "the driving test", "high-speed trains", "the apartment rent", "football teams",
        "food allergies", "short sight", "losing weight", "spiders", "flying", "twins", "the weather",
        "house prices", "the subway", "a half marathon", "the hiking club", "a car accident", "knee surgery",
        "a master's degree", "a promotion", "the wedding", "the night shift", "blood types", "birthdays",
    ),
}

# ------------------------------------------------------------------------------------------- Chinese
_ZH_SUBJECTS = (
    "我", "我姐姐", "我哥哥", "我妹妹", "我弟弟", "我老婆", "我妻子", "我老公", "我儿子", "我女儿", "我邻居", "我同事",
    "我老板", "我最好的朋友", "我妈妈", "我爸爸", "我爷爷", "我奶奶", "我外婆", "我表哥", "我父母", "我们团队",
    "我室友", "王磊", "林", "我儿子的老师", "我的双胞胎哥哥", "邻居家的孩子", "我女朋友", "书店的经理", "我爷爷奶奶",
    "我的同事们",
)
_ZH_PAST_TIMES = (
    "上个月", "去年冬天", "上周末", "昨天", "两年前", "上周二", "平安夜", "春节的时候", "2023年5月", "三个星期前",
    "去年夏天", "周五午饭以后", "十月九号", "清明节", "2022年3月", "前天", "昨天晚上", "十年前", "星期天早上",
    "周一上班前", "2021年秋天",
)
_ZH_HABIT_TIMES = (
    "每天早上", "每天晚上", "每个星期六下午", "每个周末", "每周三晚上", "每个月", "每周一和周五", "每天早上七点",
    "每天晚上十点以后", "每个星期天", "每天上班前", "每天半夜", "每个节假日", "每年春节",
)
# (place, a city may come first: 在成都的咖啡馆)
_ZH_PLACES: tuple[tuple[str, bool], ...] = (
    ("河滨公园", True), ("儿童医院", True), ("动物收容所", True), ("健身房", True), ("书店", True),
    ("公共游泳池", True), ("地铁上", False), ("火车上", False), ("家里", False), ("音乐学校", True),
    ("办公室里", False), ("面包店", True), ("阳台上", False), ("设计工作室", True), ("大学", True),
    ("一个小村子里", False), ("商场", True), ("机场", True), ("海鲜餐厅", True), ("一个渔村", False),
    ("医院", True), ("咖啡馆", True), ("船上", False), ("公交车站", True), ("高中", True), ("火锅店", True),
    ("火车站", True), ("乐团的排练厅", False), ("登山俱乐部", False), ("外婆家", False),
)
_ZH_CITIES = ("成都", "杭州", "马德里", "深圳", "北京", "上海", "青岛", "西安", "武汉", "东京", "北海道", "巴塞罗那",
              "广州", "南京")
_ZH_COMPANIONS = ("和同事们", "和最好的朋友", "和大学同学", "和邻居", "和爷爷奶奶", "和王磊", "和双胞胎哥哥",
                  "和孩子们")
# verb category -> (completed action, habit)
_ZH_VERBS: dict[str, tuple[tuple[str, str], ...]] = {
    "thing": (("买了", "买"), ("弄丢了", "弄丢"), ("借了", "借"), ("拍了", "拍"), ("卖了", "卖"), ("找到了", "找"),
              ("修好了", "修"), ("擦了", "擦"), ("带回了", "带")),
    "food": (("吃了", "吃"), ("点了", "点"), ("做了", "做"), ("尝了", "尝")),
    "drink": (("喝了", "喝"), ("点了", "点"), ("买了", "买")),
    "skill": (("练了", "练"), ("学了", "学"), ("教了", "教")),
    "topic": (("聊起了", "聊"), ("提到了", "谈到"), ("问起了", "问起"), ("抱怨了", "抱怨"), ("说起了", "说起"),
              ("梦到了", "梦到")),
}
# category -> (measure word after 一 for a completed action, or "" for none; the noun phrase)
_ZH_OBJECTS: dict[str, tuple[tuple[str, str], ...]] = {
    "thing": (
        ("辆", "白色的汽车"), ("架", "二手钢琴"), ("把", "小提琴"), ("台", "旧笔记本"), ("辆", "公路车"),
        ("个", "蓝色的手机壳"), ("些", "老邮票"), ("副", "眼镜"), ("个", "皮钱包"), ("本", "历史书"),
        ("本", "小说"), ("张", "老唱片"), ("只", "小猫"), ("只", "比格犬"), ("套", "架子鼓"), ("辆", "轮椅"),
        ("块", "手工香皂"), ("套", "小公寓"), ("副", "羽毛球拍"), ("个", "足球"), ("张", "冰岛地图"),
        ("个", "恐龙模型"), ("盒", "家庭照片"), ("张", "火车票"), ("部", "手机"), ("个", "电子阅读器"),
        ("摞", "纸质书"), ("副", "滑雪板"), ("顶", "泳帽"), ("块", "手表"), ("把", "雨伞"), ("本", "化学课本"),
        ("盆", "西红柿苗"), ("枚", "结婚戒指"), ("台", "相机"), ("个", "行李箱"), ("套", "房子"),
        ("个", "猫玩具"),
    ),
    "food": (
        ("", "花生"), ("份", "川菜"), ("盘", "烤生蚝"), ("个", "芒果"), ("些", "牛角包"), ("", "西红柿"),
        ("盘", "饺子"), ("碗", "牛肉面"), ("", "海鲜"), ("", "贝类海鲜"), ("块", "无麸质面包"), ("顿", "火锅"),
        ("笼", "包子"), ("份", "素菜"), ("碗", "米饭"), ("些", "零食"), ("个", "生日蛋糕"), ("份", "炸鸡"),
        ("块", "豆腐"), ("", "肉"),
    ),
    "drink": (("杯", "绿茶"), ("杯", "咖啡"), ("杯", "燕麦奶"), ("杯", "柠檬水"), ("杯", "橙汁"), ("杯", "奶茶"),
              ("杯", "热巧克力"), ("瓶", "啤酒")),
    "skill": tuple(("", s) for s in (
        "小提琴", "钢琴", "架子鼓", "游泳", "滑雪", "羽毛球", "冥想", "陶艺", "西班牙语", "粤语", "普通话", "英语",
        "化学", "医学", "机器学习", "土木工程", "数学", "瑜伽", "摄影", "书法", "足球", "象棋")),
    "topic": tuple(("", s) for s in (
        "冰岛的北极光", "唐朝", "恐怖片", "爱情喜剧", "当年的战争", "高血压", "晕船", "猫毛过敏", "春节",
        "新的手机应用项目", "新工作", "驾照考试", "高铁", "房租", "足球队", "食物过敏", "近视", "减肥",
        "蜘蛛", "坐飞机", "双胞胎", "天气", "房价", "地铁", "半程马拉松", "登山俱乐部", "车祸", "膝盖手术",
        "硕士学位", "升职", "婚礼", "夜班", "血型", "生日")),
}
_CATEGORIES = ("thing", "food", "drink", "skill", "topic")

_EN_WORD_RE = re.compile(r"[a-z]{3,}")
_EN_STOP = frozenset("""the and for with from about some that this his her our their into near after before every
most around twice week during last ago two three ten new old""".split())
_CJK_RUN_RE = re.compile("[\u3400-\u4dbf\u4e00-\u9fff]+")
_ZH_FILLER_CHARS = frozenset("的了一在和是我个都")
_LATIN_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[ .][A-Za-z0-9]+)*")
_TITLE_RE = re.compile(r"《[^》]{1,30}》")
_EN_NAME_RE = re.compile(r"[A-Za-z0-9][\w'-]*")
_EN_JOINERS = frozenset({"of", "the"})
_EN_NOT_NAMES = frozenset({"I", "My", "Our", "The", "A", "An", "In", "On", "At", "We", "He", "She", "It", "They"})


def _en_words(text: str) -> set[str]:
    return {w for w in _EN_WORD_RE.findall(text.lower()) if w not in _EN_STOP}


def _zh_bigrams(text: str) -> set[str]:
    out: set[str] = set()
    for run in _CJK_RUN_RE.findall(text):
        out.update(run[i:i + 2] for i in range(len(run) - 1)
                   if run[i] not in _ZH_FILLER_CHARS and run[i + 1] not in _ZH_FILLER_CHARS)
    return out


def _en_names(facts: Sequence[str]) -> list[str]:
    """Capitalised names in English facts (``Chengdu``, ``iPhone 15 Pro``, ``One Hundred Years of Solitude``),
    sentence openers and pronouns excluded; punctuation ends a name."""
    names: list[str] = []

    def flush(run: list[str]) -> None:
        while run and run[-1] in _EN_JOINERS:
            run.pop()
        if run and len(" ".join(run)) > 1:
            names.append(" ".join(run))
        run.clear()

    for fact in facts:
        run: list[str] = []
        end = 0
        for match in _EN_NAME_RE.finditer(fact):
            tok = match.group(0)
            if fact[end:match.start()].strip():  # a comma or a full stop between the two words
                flush(run)
            end = match.end()
            named = tok not in _EN_NOT_NAMES and (any(c.isupper() for c in tok) or (bool(run) and tok.isdigit()))
            if named or (run and tok in _EN_JOINERS and run[-1] not in _EN_JOINERS):
                run.append(tok)
            else:
                flush(run)
        flush(run)
    return list(dict.fromkeys(names))


def _zh_names(facts: Sequence[str]) -> list[str]:
    """Latin product names and 《titles》 in Chinese facts (``ThinkPad X1``, ``《百年孤独》``)."""
    names: list[str] = []
    for fact in facts:
        names.extend(m.strip() for m in _LATIN_NAME_RE.findall(fact) if len(m.strip()) > 1)
        names.extend(_TITLE_RE.findall(fact))
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class _Slot:
    """The words of one slot, and those of them that occur in the facts."""

    every: tuple[Any, ...]
    shared: tuple[Any, ...]

    def pick(self, rng: random.Random) -> Any:
        if self.shared and rng.random() < FACT_SHARE:
            return self.shared[int(rng.random() * len(self.shared))]
        return self.every[int(rng.random() * len(self.every))]


def _slot(items: Sequence[Any], shares: Any) -> _Slot:
    return _Slot(tuple(items), tuple(i for i in items if shares(i)))


@lru_cache(maxsize=16)
def _lexicon(lang: str, facts: tuple[str, ...]) -> dict[str, _Slot]:
    """The slots of ``lang``, each with its words that occur in ``facts``."""
    if lang == "en":
        fact_words = set().union(*(_en_words(f) for f in facts)) if facts else set()

        def shares(text: str) -> bool:
            return bool(_en_words(text) & fact_words)

        names = _en_names(facts)
        objects = {c: list(o) for c, o in _EN_OBJECTS.items()}
        objects["topic"] += [o for c in _CATEGORIES if c != "topic" for o in _EN_OBJECTS[c]] + names
        slots = {
            "subject": _slot(_EN_SUBJECTS, lambda s: shares(s[0])),
            "past": _slot(_EN_PAST_TIMES, shares), "habit": _slot(_EN_HABIT_TIMES, shares),
            "place": _slot(_EN_PLACES, lambda p: shares(p[0])), "city": _slot(_EN_CITIES, shares),
            "companion": _slot(_EN_COMPANIONS, shares),
        }
        for c in _CATEGORIES:
            slots[f"verb:{c}"] = _slot(_EN_VERBS[c], lambda v: shares(v[0]))
            slots[f"object:{c}"] = _slot(objects[c], lambda o: o in names or shares(o))
        return slots
    fact_bigrams = set().union(*(_zh_bigrams(f) for f in facts)) if facts else set()

    def zh_shares(text: str) -> bool:
        return bool(_zh_bigrams(text) & fact_bigrams)

    zh_names = [("", n) for n in _zh_names(facts)]
    zh_objects = {c: list(o) for c, o in _ZH_OBJECTS.items()}
    zh_objects["topic"] += [("", o[1]) for c in _CATEGORIES if c != "topic" for o in _ZH_OBJECTS[c]] + zh_names
    slots = {
        "subject": _slot(_ZH_SUBJECTS, zh_shares),
        "past": _slot(_ZH_PAST_TIMES, zh_shares), "habit": _slot(_ZH_HABIT_TIMES, zh_shares),
        "place": _slot(_ZH_PLACES, lambda p: zh_shares(p[0])), "city": _slot(_ZH_CITIES, zh_shares),
        "companion": _slot(_ZH_COMPANIONS, zh_shares),
    }
    for c in _CATEGORIES:
        slots[f"verb:{c}"] = _slot(_ZH_VERBS[c], lambda v: zh_shares(v[1]))
        slots[f"object:{c}"] = _slot(zh_objects[c], lambda o: o in zh_names or zh_shares(o[1]))
    return slots


def _english(rng: random.Random, slots: dict[str, _Slot]) -> str:
    subject, form = slots["subject"].pick(rng)
    category = _CATEGORIES[int(rng.random() * len(_CATEGORIES))]
    past = rng.random() < 0.6
    forms = slots[f"verb:{category}"].pick(rng)
    verb = forms[0] if past else forms[1 if form == "3" else 2]
    parts = [verb, slots[f"object:{category}"].pick(rng)]
    if rng.random() < 0.15:
        parts.append(slots["companion"].pick(rng))
    if rng.random() < 0.75:
        place, citable = slots["place"].pick(rng)
        parts.append(f"{place} in {slots['city'].pick(rng)}" if citable and rng.random() < 0.4 else place)
    when = slots["past" if past else "habit"].pick(rng) if (not past or rng.random() < 0.85) else None
    if when is not None and rng.random() < 0.2:  # time first: "Last weekend, my sister ..."
        opener = subject if subject == "I" or not subject.startswith(("My ", "Our ", "The ")) else (
            subject[0].lower() + subject[1:])
        return f"{when[0].upper()}{when[1:]}, {opener} {' '.join(parts)}."
    return f"{subject} {' '.join(parts)}{' ' + when if when else ''}."


def _chinese(rng: random.Random, slots: dict[str, _Slot]) -> str:
    subject = slots["subject"].pick(rng)
    category = _CATEGORIES[int(rng.random() * len(_CATEGORIES))]
    past = rng.random() < 0.6
    done, habit = slots[f"verb:{category}"].pick(rng)
    measure, noun = slots[f"object:{category}"].pick(rng)
    when = slots["past" if past else "habit"].pick(rng) if (not past or rng.random() < 0.85) else ""
    middle = ""
    if rng.random() < 0.15:
        middle += slots["companion"].pick(rng) + "一起"
    if rng.random() < 0.75:
        place, citable = slots["place"].pick(rng)
        middle += f"在{slots['city'].pick(rng)}的{place}" if citable and rng.random() < 0.4 else f"在{place}"
    if past:
        action = f"{done}{'一' + measure if measure else ''}{noun}"
    else:
        middle = "都" + middle  # 每…都: a habit
        action = f"{habit}{noun}"
    if when and rng.random() < 0.2:  # time first: "上个月，我姐姐…"
        return f"{when}，{subject}{middle}{action}。"
    return f"{subject}{when}{middle}{action}。"


def filler_sentences(lang: str, n: int, seed: int = 0, *, facts: Sequence[str] = ()) -> list[str]:
    """``n`` grammatical sentences of random meaning in ``lang`` (see the module docstring).

    Args:
        lang: ``"en"`` or ``"zh"`` (:data:`FILLER_LANGUAGES`).
        n: how many sentences (0 or more).
        seed: the random seed; the same ``(lang, n, seed, facts)`` gives the same sentences, and a larger ``n``
            extends a smaller one.
        facts: facts of the same language whose words the filler should often share (default: none, the
            general word lists only).

    Returns:
        The sentences, distinct from each other.

    Raises:
        ConfigurationError: an unknown language or a negative ``n``.
    """
    if lang not in FILLER_LANGUAGES:
        raise ConfigurationError(f"no filler generator for language {lang!r}; choose from {list(FILLER_LANGUAGES)}")
    if n < 0:
        raise ConfigurationError(f"the filler size must be 0 or more, got {n}")
    slots = _lexicon(lang, tuple(facts))
    write = _english if lang == "en" else _chinese
    rng = random.Random(f"vecmem-filler:{lang}:{seed}")  # a str seed: the same stream in every process
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < n:
        sentence = write(rng, slots)
        for _ in range(20):  # redraw a repeat; the slots hold over a million combinations
            if sentence not in seen:
                break
            sentence = write(rng, slots)
        seen.add(sentence)
        out.append(sentence)
    return out


def filler_records(lang: str, n: int, seed: int = 0, *, facts: Sequence[str] = ()) -> list[MemoryRecord]:
    """:func:`filler_sentences` as GLOBAL memories, ids ``filler-<lang>-<seed>-<i>``, ``provenance.filler``
    ``True`` (an ordinary fact otherwise: extracted, undated, untagged).

    Args and Raises: as :func:`filler_sentences`.
    """
    provenance = Provenance.model_validate({"filler": True})
    return [
        MemoryRecord(id=f"filler-{lang}-{seed}-{i:06d}", memory_scope="GLOBAL_MEMORY", summary=text,
                     provenance=provenance)
        for i, text in enumerate(filler_sentences(lang, n, seed, facts=facts))
    ]


def is_filler(record: MemoryRecord) -> bool:
    """Whether a record is filler (``provenance.filler``), never an answer of an evaluation."""
    return bool((record.provenance.model_extra or {}).get("filler"))
